import { sandboxKey } from '../domain/sandbox.js';
/**
 * This gateway's live supervisor sessions, one per sandbox. A new session for a sandbox supersedes the
 * old one; removal is remove-if-current, so the late cleanup of a superseded socket can never evict its
 * replacement (the reference gateway's rule, kept).
 */

export interface RegisteredSession {
  readonly sessionId: string;
  readonly namespace: string;
  readonly name: string;
}

export class SessionRegistry<S extends RegisteredSession> {
  private readonly byKey = new Map<string, S>();

  get size(): number {
    return this.byKey.size;
  }

  get(namespace: string, name: string): S | undefined {
    return this.byKey.get(sandboxKey(namespace, name));
  }

  /** Makes `s` the sandbox's session; returns the session it supersedes, if any. */
  put(s: S): S | undefined {
    const key = sandboxKey(s.namespace, s.name);
    const old = this.byKey.get(key);
    this.byKey.set(key, s);
    return old === s ? undefined : old;
  }

  /** Removes `s` only if it is still the sandbox's session. */
  removeIfCurrent(s: S): boolean {
    const key = sandboxKey(s.namespace, s.name);
    if (this.byKey.get(key) !== s) return false;
    this.byKey.delete(key);
    return true;
  }

  values(): IterableIterator<S> {
    return this.byKey.values();
  }
}
