import type { RelayMux } from './relay-mux.js';
import { RelayError, type RelayStream } from './relay-stream.js';
import { sandboxKey } from '../domain/sandbox.js';

/**
 * The gateway side of the relay: opens streams over this gateway's local supervisor sessions, with caps
 * on streams per sandbox, per namespace and overall (open and still opening, as the reference gateway
 * capped pending relays at 32 per sandbox and 256 overall; a namespace gets a quarter by default) and a bound on the wait for OPEN_OK (its 10 s claim limit).
 * A stream holds its place under the caps until it closes.
 */

export interface RelayLimits {
  /** Streams (open or opening) to one sandbox; more fail with `busy`. */
  readonly maxStreamsPerSandbox: number;
  /**
   * Streams (open or opening) to the sandboxes of one namespace: one tenant's streams held unanswered
   * (until the headers timeout, and again) leave every other tenant theirs. More fail with `busy`.
   */
  readonly maxStreamsPerNamespace: number;
  /** Streams (open or opening) on this gateway; more fail with `busy`. */
  readonly maxStreams: number;
  /** Wait for the supervisor's OPEN_OK; past it the open fails with `timeout`. */
  readonly openTimeoutMs: number;
}

export const DEFAULT_RELAY_LIMITS: RelayLimits = { maxStreamsPerSandbox: 32, maxStreamsPerNamespace: 64, maxStreams: 256, openTimeoutMs: 10_000 };

/** Opens a byte stream to `127.0.0.1:<port>` inside a sandbox, over the sandbox's session on this gateway. */
export interface RelayOpener {
  /** Rejects with a RelayError (`no_session`, `busy`, `refused`, `timeout`, `not_allowed`, `aborted`, …). */
  openRelayStream(namespace: string, name: string, port: number, signal?: AbortSignal): Promise<RelayStream>;
}

export class LimitedRelayOpener implements RelayOpener {
  private total = 0;
  private readonly perSandbox = new Map<string, number>();
  private readonly perNamespace = new Map<string, number>();

  constructor(
    private readonly lookup: (namespace: string, name: string) => RelayMux | undefined,
    private readonly limits: RelayLimits = DEFAULT_RELAY_LIMITS,
  ) {}

  /** Streams open or opening on this gateway. */
  get active(): number {
    return this.total;
  }

  activeFor(namespace: string, name: string): number {
    return this.perSandbox.get(sandboxKey(namespace, name)) ?? 0;
  }

  openRelayStream(namespace: string, name: string, port: number, signal?: AbortSignal): Promise<RelayStream> {
    if (signal?.aborted === true) return Promise.reject(new RelayError('aborted', 'the request was cancelled'));
    const mux = this.lookup(namespace, name);
    if (mux === undefined || mux.closed) return Promise.reject(new RelayError('no_session', `this gateway holds no supervisor session for ${sandboxKey(namespace, name)}`));
    const key = sandboxKey(namespace, name);
    const mine = this.perSandbox.get(key) ?? 0;
    if (mine >= this.limits.maxStreamsPerSandbox) return Promise.reject(new RelayError('busy', `${sandboxKey(namespace, name)} already has ${mine} relay streams`));
    const ours = this.perNamespace.get(namespace) ?? 0;
    if (ours >= this.limits.maxStreamsPerNamespace) return Promise.reject(new RelayError('busy', `namespace ${namespace} already has ${ours} relay streams on this gateway`));
    if (this.total >= this.limits.maxStreams) return Promise.reject(new RelayError('busy', `this gateway already carries ${this.total} relay streams`));
    let s: RelayStream;
    try {
      s = mux.open(port);
    } catch (err) {
      return Promise.reject(err);
    }
    this.total++;
    this.perSandbox.set(key, mine + 1);
    this.perNamespace.set(namespace, ours + 1);
    s.once('close', () => this.release(key, namespace));
    return new Promise<RelayStream>((resolve, reject) => {
      const timer = setTimeout(() => s.destroy(new RelayError('timeout', `the supervisor did not open port ${port} within ${this.limits.openTimeoutMs} ms`)), this.limits.openTimeoutMs);
      timer.unref();
      const onAbort = (): void => {
        s.destroy(new RelayError('aborted', 'the request was cancelled'));
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      const settle = (): void => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        s.off('open', opened);
        s.off('error', failed);
        s.off('close', closed);
      };
      const opened = (): void => {
        settle();
        resolve(s);
      };
      const failed = (err: Error): void => {
        settle();
        reject(err instanceof RelayError ? err : new RelayError('failed', err.message));
      };
      const closed = (): void => {
        settle();
        reject(new RelayError('failed', 'the relay stream closed before it opened'));
      };
      s.once('open', opened);
      s.once('error', failed);
      s.once('close', closed);
    });
  }

  private release(key: string, namespace: string): void {
    this.total--;
    decrement(this.perSandbox, key);
    decrement(this.perNamespace, namespace);
  }
}

function decrement(counts: Map<string, number>, key: string): void {
  const n = (counts.get(key) ?? 1) - 1;
  if (n <= 0) counts.delete(key);
  else counts.set(key, n);
}
