import { createRequire } from 'node:module';

/**
 * node:http's own response parser (llhttp, through the HTTPParser binding node:http's client uses), run
 * in-process over given bytes, one byte at a time so that where a message ends is known to the byte. The
 * oracle of the differential tests of hand-written HTTP/1.1 readers (test/differential/).
 */

interface Parser {
  initialize(type: number, resource: object, maxHeaderSize: number, lenient: number): void;
  execute(data: Buffer): number | Error;
  finish(): undefined | Error;
  close(): void;
  [slot: number]: unknown;
}

interface ParserModule {
  HTTPParser: {
    new (): Parser;
    readonly RESPONSE: number;
    readonly kOnHeaders: number;
    readonly kOnHeadersComplete: number;
    readonly kOnBody: number;
    readonly kOnMessageComplete: number;
  };
}

const { HTTPParser } = createRequire(import.meta.url)('_http_common') as ParserModule;

/** What llhttp read from one response. */
export interface LlhttpResponse {
  /** Set once the head was read. */
  readonly head?: { readonly status: number; readonly version: string; readonly raw: readonly string[] };
  /** Offset just past the head's blank line. */
  readonly headEnd?: number;
  /** The body, chunked framing removed. */
  readonly body: Buffer;
  /** Offset just past the message's last byte; undefined while it is not complete. */
  readonly end?: number;
  /** llhttp's error code (`HPE_…`), when it refused the bytes. */
  readonly error?: string;
}

/**
 * Parses `bytes` as one response (to a HEAD request when `head`); `closed`: the connection closed after
 * them (a body delimited by the close then ends there).
 */
export function llhttpResponse(bytes: Buffer, opts: { head?: boolean; closed?: boolean } = {}): LlhttpResponse {
  const p = new HTTPParser();
  p.initialize(HTTPParser.RESPONSE, {}, 0, 0);
  const raw: string[] = [];
  const body: Buffer[] = [];
  let offset = 0;
  let head: LlhttpResponse['head'];
  let headEnd: number | undefined;
  let end: number | undefined;
  let error: string | undefined;
  p[HTTPParser.kOnHeaders] = (headers: string[]) => raw.push(...headers);
  p[HTTPParser.kOnHeadersComplete] = (major: number, minor: number, headers: string[] | undefined, _method: unknown, _url: unknown, status: number) => {
    if (headers !== undefined) raw.push(...headers);
    head = { status, version: `${major}.${minor}`, raw };
    headEnd = offset;
    // 1: no body follows (what node:http's client answers for a HEAD request).
    return opts.head === true ? 1 : 0;
  };
  p[HTTPParser.kOnBody] = (b: Buffer) => body.push(Buffer.from(b));
  p[HTTPParser.kOnMessageComplete] = () => {
    end ??= offset;
  };
  for (let i = 0; i < bytes.length && end === undefined && error === undefined; i++) {
    offset = i + 1;
    const r = p.execute(bytes.subarray(i, i + 1));
    if (r instanceof Error) error = (r as Error & { code?: string }).code ?? r.message;
  }
  if (opts.closed === true && end === undefined && error === undefined) {
    offset = bytes.length;
    const r = p.finish();
    if (r instanceof Error) error = (r as Error & { code?: string }).code ?? r.message;
  }
  p.close();
  return { head, headEnd, body: Buffer.concat(body), end, error };
}
