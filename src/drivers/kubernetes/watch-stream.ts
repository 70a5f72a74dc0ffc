import { KubeApiError, readStatus, type KubeStatus } from './kube-client.js';

/**
 * The Kubernetes watch wire format: one JSON `WatchEvent` ({type, object}) per line, streamed with chunked
 * transfer encoding. A chunk may end in the middle of an event (or of a UTF-8 sequence), so lines are
 * reassembled from raw bytes before decoding; a newline byte never occurs inside a multi-byte UTF-8
 * sequence, so splitting bytes on 0x0a is safe.
 */

export type WatchEvent =
  | { readonly type: 'ADDED' | 'MODIFIED' | 'DELETED'; readonly object: Readonly<Record<string, unknown>>; readonly resourceVersion: string }
  /** Carries only a resourceVersion: the watch has seen everything up to it (allowWatchBookmarks). */
  | { readonly type: 'BOOKMARK'; readonly resourceVersion: string }
  /** The server ends the watch with a metav1.Status (410 Expired/Gone: relist). */
  | { readonly type: 'ERROR'; readonly status: KubeStatus };

/** The longest line accepted: an object is at most ~1.5 MiB in etcd; anything far past that is garbage. */
export const MAX_LINE_BYTES = 16 * 1024 * 1024;

function protocolError(message: string): KubeApiError {
  return new KubeApiError(0, 'WatchProtocolError', message);
}

function resourceVersionOf(object: Record<string, unknown>): string {
  const meta = object.metadata;
  if (typeof meta !== 'object' || meta === null) return '';
  const rv = (meta as Record<string, unknown>).resourceVersion;
  return typeof rv === 'string' ? rv : '';
}

/** Parses one line of a watch stream. Throws KubeApiError `WatchProtocolError` on anything malformed. */
export function parseWatchEvent(line: string): WatchEvent {
  let v: unknown;
  try {
    v = JSON.parse(line);
  } catch {
    throw protocolError(`watch event is not JSON: ${JSON.stringify(line.slice(0, 120))}`);
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw protocolError('watch event is not an object');
  const e = v as Record<string, unknown>;
  const object = e.object;
  if (typeof object !== 'object' || object === null || Array.isArray(object)) throw protocolError(`watch event ${String(e.type)} has no object`);
  const o = object as Record<string, unknown>;
  switch (e.type) {
    case 'ADDED':
    case 'MODIFIED':
    case 'DELETED':
      return { type: e.type, object: o, resourceVersion: resourceVersionOf(o) };
    case 'BOOKMARK': {
      const rv = resourceVersionOf(o);
      if (rv === '') throw protocolError('BOOKMARK without metadata.resourceVersion');
      return { type: 'BOOKMARK', resourceVersion: rv };
    }
    case 'ERROR':
      return { type: 'ERROR', status: readStatus(o) ?? { code: 0, reason: '', message: JSON.stringify(o).slice(0, 200) } };
    default:
      throw protocolError(`unknown watch event type ${JSON.stringify(e.type)}`);
  }
}

/** Reassembles newline-delimited lines from arbitrary byte chunks. */
export class LineSplitter {
  private parts: Buffer[] = [];
  private size = 0;

  constructor(private readonly maxLineBytes = MAX_LINE_BYTES) {}

  /** Feeds one chunk; calls `onLine` for every complete non-empty line. Throws when a line is too long. */
  push(chunk: Buffer, onLine: (line: string) => void): void {
    let start = 0;
    for (let nl = chunk.indexOf(0x0a, start); nl !== -1; nl = chunk.indexOf(0x0a, start)) {
      const piece = chunk.subarray(start, nl);
      start = nl + 1;
      const whole = this.parts.length === 0 ? piece : Buffer.concat([...this.parts, piece]);
      this.parts = [];
      this.size = 0;
      this.check(whole.length);
      const line = whole.toString('utf8').trim();
      if (line !== '') onLine(line);
    }
    if (start < chunk.length) {
      const rest = chunk.subarray(start);
      this.size += rest.length;
      this.check(this.size);
      // Copy: the stream may reuse the chunk's memory once this call returns.
      this.parts.push(Buffer.from(rest));
    }
  }

  /** At the end of the stream: a last line without a newline still counts. */
  end(onLine: (line: string) => void): void {
    if (this.parts.length === 0) return;
    const line = Buffer.concat(this.parts).toString('utf8').trim();
    this.parts = [];
    this.size = 0;
    if (line !== '') onLine(line);
  }

  private check(n: number): void {
    if (n > this.maxLineBytes) throw protocolError(`watch line longer than ${this.maxLineBytes} bytes`);
  }
}
