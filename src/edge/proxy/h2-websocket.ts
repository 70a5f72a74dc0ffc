import { createHash, randomBytes } from 'node:crypto';
import type { ServerHttp2Stream } from 'node:http2';
import { forwardResponseHeaders } from '../forwarding/forward-headers.js';
import { readAnswerHead } from '../forwarding/answer-framing.js';
import { openWhileOpen, watchData, type Connect } from '../forwarding/websocket-tunnel.js';
import type { Exchange } from '../../observability/exchange.js';
import { h2ResponseHeaders } from '../forwarding/h2-request.js';

const EMPTY = Buffer.alloc(0);

/**
 * A WebSocket opened by an HTTP/2 client (RFC 8441): an extended CONNECT stream with `:protocol:
 * websocket`, carried to the sandbox as an HTTP/1.1 Upgrade (RFC 6455 §4.1). HTTP/2 has no
 * Sec-WebSocket-Key (RFC 8441 §5), so the proxy makes one for the upstream handshake and checks the
 * upstream's Sec-WebSocket-Accept against it; a 101 becomes the stream's `:status 200` (with the
 * negotiated subprotocol and extensions), and from then on the stream's DATA and the upstream's bytes are
 * the same WebSocket frames, spliced. An upgrade the sandbox declines reaches the client as that status
 * and its headers, with no body, and the stream ends.
 */

/** RFC 6455 §1.3. */
const WS_GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11';
/** The upstream's answer fields an HTTP/2 200 carries on (the rest belong to the HTTP/1.1 handshake). */
const NEGOTIATED = new Set(['sec-websocket-protocol', 'sec-websocket-extensions']);
/** Handshake fields the proxy sets itself; a client's copies (which RFC 8441 clients do not send) go. */
const OWN = new Set(['sec-websocket-key', 'sec-websocket-accept']);

/**
 * Opens the upstream with `open`, sends the handshake (`GET path`, `headers` already filtered by the
 * proxy's rules, plus Connection/Upgrade/Sec-WebSocket-Key) and answers the stream from the upstream's
 * answer. `fail` gets the error when the upstream could not be opened or did not answer a handshake
 * (nothing was sent on the stream yet). `x`, when records are kept, gets the status the stream was
 * answered with (200 for an accepted WebSocket, else the sandbox's) and the DATA bytes both ways.
 */
// The upstream half of the parameters is spliceUpgrade's (websocket-tunnel.ts), in the same order, so a
// door calls both alike; the client side differs (an HTTP/2 stream here, a socket and its head there).
export function tunnelExtendedConnect(
  stream: ServerHttp2Stream,
  path: string,
  headers: readonly string[],
  open: Connect,
  idleTimeoutMs: number,
  fail: (err: unknown) => void,
  activity?: () => void,
  x?: Exchange,
): void {
  openWhileOpen(stream, open, fail, (up) => {
    const key = randomBytes(16).toString('base64');
    let text = `GET ${path} HTTP/1.1\r\n`;
    for (let i = 0; i < headers.length; i += 2) if (!OWN.has(headers[i]!.toLowerCase())) text += `${headers[i]}: ${headers[i + 1]}\r\n`;
    up.write(text + `Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: ${key}\r\n\r\n`);
    up.setTimeout(idleTimeoutMs, () => {
      up.destroy();
      stream.destroy();
    });
    up.on('error', () => stream.destroy());
    stream.once('close', () => up.destroy());
    readAnswerHead(up, (answer, rest) => {
      if (answer === undefined) {
        up.destroy();
        return fail(new Error('the upstream answered the upgrade with no HTTP/1.1 head'));
      }
      if (answer.status !== 101) {
        x?.answered(answer.status);
        stream.respond(h2ResponseHeaders(answer.status, withoutLength(forwardResponseHeaders(answer.raw))), { endStream: true });
        return void up.destroy();
      }
      const accept = createHash('sha1').update(key + WS_GUID).digest('base64');
      if (valueOf(answer.raw, 'sec-websocket-accept') !== accept) {
        up.destroy();
        return fail(new Error('the upstream answered the upgrade with a wrong Sec-WebSocket-Accept'));
      }
      const negotiated: string[] = [];
      for (let i = 0; i < answer.raw.length; i += 2) if (NEGOTIATED.has(answer.raw[i]!.toLowerCase())) negotiated.push(answer.raw[i]!, answer.raw[i + 1]!);
      x?.answered(200, 101);
      stream.respond(h2ResponseHeaders(200, negotiated));
      if (rest.length > 0) stream.write(rest);
      if (x !== undefined) {
        x.bytesOut += rest.length;
        stream.on('data', (chunk: Buffer) => (x.bytesIn += chunk.length));
        up.on('data', (chunk: Buffer) => (x.bytesOut += chunk.length));
      }
      // Data frames either way count as the sandbox's activity; pings alone do not (ws-frames.ts).
      if (activity !== undefined) watchData(true, stream, up, EMPTY, rest, activity);
      // The upstream's end (a close frame, then FIN) ends the stream cleanly; the client's END_STREAM ends the upstream's writing side.
      up.pipe(stream);
      stream.pipe(up);
    });
  });
}

function valueOf(raw: readonly string[], name: string): string | undefined {
  for (let i = 0; i < raw.length; i += 2) if (raw[i]!.toLowerCase() === name) return raw[i + 1];
  return undefined;
}

/** A declined answer goes without its body, so without the length of one. */
function withoutLength(list: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < list.length; i += 2) if (list[i]!.toLowerCase() !== 'content-length') out.push(list[i]!, list[i + 1]!);
  return out;
}
