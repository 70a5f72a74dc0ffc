import { once } from 'node:events';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import { eventually } from './eventually.js';

/** A raw CONNECT: the socket, the answer's status line and head, and every byte read after the head. */
export interface RawTunnel {
  readonly socket: Socket;
  readonly status: number;
  readonly head: string;
  /** The bytes after the head read so far: a refusal's body, or what came through the tunnel. */
  readonly received: () => Buffer;
  /** Resolves when the gateway has closed its side. */
  readonly ended: Promise<void>;
  /** Stops reading (a client that never reads). */
  stopReading(): void;
}

/**
 * Sends `CONNECT authority` with `headers` (and `extra` bytes in the same write, as a client pipelining
 * its first bytes does) to the proxy at `port`, over TLS when `tls` is given; resolves once the answer's
 * head is read, and goes on reading.
 */
export function rawConnect(port: number, authority: string, headers: Record<string, string> = {}, extra = '', tls?: { ca: Buffer; servername: string }): Promise<RawTunnel> {
  const socket = tls === undefined ? connect(port, '127.0.0.1') : (tlsConnect({ port, host: '127.0.0.1', ca: tls.ca, servername: tls.servername }) as unknown as Socket);
  let text = `CONNECT ${authority} HTTP/1.1\r\nhost: ${authority}\r\n`;
  for (const [k, v] of Object.entries(headers)) text += `${k}: ${v}\r\n`;
  socket.write(text + '\r\n' + extra);
  const ended = new Promise<void>((resolve) => {
    socket.once('end', resolve);
    socket.once('close', resolve);
  });
  return new Promise((resolve, reject) => {
    let buf = Buffer.alloc(0);
    let head: string | undefined;
    const onData = (c: Buffer): void => {
      buf = Buffer.concat([buf, c]);
      if (head !== undefined) return;
      const end = buf.indexOf('\r\n\r\n');
      if (end < 0) return;
      head = buf.subarray(0, end).toString('latin1');
      buf = buf.subarray(end + 4);
      resolve({
        socket,
        status: Number(head.split(' ')[1]),
        head,
        received: () => buf,
        ended,
        stopReading: () => {
          socket.off('data', onData);
          socket.pause();
        },
      });
    };
    socket.on('data', onData);
    socket.once('error', reject);
    socket.once('close', () => reject(new Error(`closed before an answer; read ${JSON.stringify(buf.toString('latin1'))}`)));
  });
}

/** A refusal's whole body (the gateway closes after it), as JSON. */
export async function refusalBody(t: RawTunnel): Promise<{ code: string; message: string }> {
  await t.ended;
  return JSON.parse(t.received().toString('utf8')) as { code: string; message: string };
}

/** Sends `text` through an open tunnel; resolves once `want` bytes (all of them so far) came back. */
export async function roundTrip(t: RawTunnel, text: string, want = text): Promise<string> {
  t.socket.write(text);
  return eventually(() => t.received().length >= Buffer.byteLength(want) && t.received().toString('utf8'), 10_000, () => `${JSON.stringify(want)} through the tunnel (got ${JSON.stringify(t.received().toString('utf8'))})`);
}

/** A TCP echo server on loopback; counts the connections it accepted. */
export async function startEcho(): Promise<{ server: Server; port: number; accepted: () => number }> {
  let n = 0;
  const server = createServer((s) => {
    n++;
    s.on('error', () => s.destroy());
    s.pipe(s);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return { server, port: (server.address() as AddressInfo).port, accepted: () => n };
}

/** A TCP server that writes as fast as its peer reads, forever; reports what it has written and whether it waits. */
export async function startFirehose(): Promise<{ server: Server; port: number; written: () => number; waiting: () => boolean }> {
  let written = 0;
  let waiting = false;
  const chunk = Buffer.alloc(64 * 1024, 0x61);
  const server = createServer((s) => {
    s.on('error', () => s.destroy());
    const pump = (): void => {
      while (!s.destroyed) {
        written += chunk.length;
        if (!s.write(chunk)) {
          waiting = true;
          s.once('drain', () => {
            waiting = false;
            pump();
          });
          return;
        }
      }
    };
    pump();
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return { server, port: (server.address() as AddressInfo).port, written: () => written, waiting: () => waiting };
}

/** Waits until the firehose has been blocked (waiting for a drain, writing nothing) for 30 checks in a row. */
export async function firehoseBlocked(firehose: { written: () => number; waiting: () => boolean }): Promise<void> {
  let last = -1;
  let stable = 0;
  await eventually(() => {
    const w = firehose.written();
    stable = firehose.waiting() && w === last ? stable + 1 : 0;
    last = w;
    return stable >= 30;
  }, 20_000, () => `the firehose to stay blocked (written ${firehose.written()})`);
}
