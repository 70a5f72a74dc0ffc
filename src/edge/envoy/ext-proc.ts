import { deny, type Allow, type Decision, type Deny } from '../../domain/decide.js';
import type { RouteRequest } from '../../domain/route-key.js';
import { callSignal, GrpcStatus, type BidiHandler, type ServerCall } from '../../lib/grpc-h2-server.js';
import type { Logger } from '../../observability/logger.js';
import type { Decider } from '../decider.js';
import { renderDenial } from '../denial.js';
import { addHeader, cookieForSandbox, forwardedClient, headersToRemove, UPSTREAM_PROTOCOL_HEADER, upstreamIsH2c, type DoorOptions } from '../headers.js';
import { relayHeaders } from '../relay/relay-headers.js';

/**
 * Envoy ext_proc v3 (`envoy.service.ext_proc.v3.ExternalProcessor/Process`): one bidirectional stream per
 * HTTP request; every ProcessingRequest gets exactly one ProcessingResponse, in order.
 *
 * `request_headers` → a header mutation that sets the upstream header (values in `raw_value`: Envoy ≥ 1.27
 * sends and expects raw bytes) with `clear_route_cache: true` (so the route is re-picked on the header we
 * set; `x-sandgate-upstream-protocol: h2c` for a port declared h2c picks the HTTP/2 sandbox cluster), or
 * an `immediate_response` for a denial. Any other message kind — which a headers-only
 * configuration (`request_header_mode: SEND`, the rest SKIP/NONE) should not send — gets a plain CONTINUE.
 */

interface HeaderValue {
  key: string;
  value?: string;
  raw_value?: Buffer;
}

interface ProcessingRequest {
  request?: string;
  request_headers?: { headers?: { headers?: HeaderValue[] }; end_of_stream?: boolean };
}

const OVERWRITE = 'OVERWRITE_IF_EXISTS_OR_ADD' as const;
const CONTINUE = { status: 'CONTINUE' } as const;

/** Plain CONTINUE answers, by the message kind they answer. */
const PASS: Readonly<Record<string, object>> = {
  request_body: { request_body: { response: CONTINUE } },
  response_headers: { response_headers: { response: CONTINUE } },
  response_body: { response_body: { response: CONTINUE } },
  request_trailers: { request_trailers: {} },
  response_trailers: { response_trailers: {} },
};

function rawSet(key: string, value: string): object {
  return { header: { key, raw_value: Buffer.from(value, 'latin1') }, append_action: OVERWRITE };
}

export function headersToRoute(list: readonly HeaderValue[] | undefined): RouteRequest {
  const headers: Record<string, string> = {};
  if (list !== undefined) {
    for (const h of list) {
      const v = h.raw_value !== undefined && h.raw_value.length > 0 ? h.raw_value.toString('latin1') : (h.value ?? '');
      addHeader(headers, h.key.toLowerCase(), v);
    }
  }
  return { headers, host: headers[':authority'] ?? headers.host, path: headers[':path'], method: headers[':method'], secure: headers[':scheme'] === 'https' };
}

function allowMessage(d: Allow, opts: DoorOptions, req: RouteRequest): object {
  const set_headers = [rawSet(opts.upstreamHeader, d.upstream)];
  if (d.target.path !== undefined) set_headers.push(rawSet(':path', d.target.path));
  const relay = relayHeaders(d, opts.relay);
  for (const [k, v] of relay) set_headers.push(rawSet(k, v));
  // An h2c port's answer also sets the protocol header (a relay decision's too: the relay listener takes HTTP/2).
  const h2c = upstreamIsH2c(d);
  if (h2c) set_headers.push(rawSet(UPSTREAM_PROTOCOL_HEADER, 'h2c'));
  const names = [opts.upstreamHeader];
  if (h2c) names.push(UPSTREAM_PROTOCOL_HEADER);
  for (const [k] of relay) names.push(k);
  let remove = headersToRemove(req.headers, opts.removeHeaders, names);
  const cookie = cookieForSandbox(opts, req.headers);
  if (cookie === '') (remove ??= []).push('cookie');
  else if (cookie !== undefined) set_headers.push(rawSet('cookie', cookie));
  return {
    request_headers: {
      response: {
        status: 'CONTINUE',
        header_mutation: { set_headers, remove_headers: remove ?? [] },
        clear_route_cache: true,
      },
    },
  };
}

function denyMessage(d: Deny, accept: string | undefined, fetchMode?: string): object {
  const r = renderDenial(d, accept, fetchMode);
  return {
    immediate_response: {
      status: { code: r.status },
      headers: { set_headers: r.headers.map(([k, v]) => rawSet(k, v)) },
      body: Buffer.from(r.body),
      details: d.code,
    },
  };
}

function decisionMessage(d: Decision, opts: DoorOptions, req: RouteRequest): object {
  return d.allow ? allowMessage(d, opts, req) : denyMessage(d, req.headers.accept, req.headers['sec-fetch-mode']);
}

/**
 * `maxQueued`: messages one stream may queue behind a readiness wait; their bytes are held against the
 * stream's and the connection's buffer bounds (`call.hold`). Past either, the stream ends
 * RESOURCE_EXHAUSTED: Envoy sends a request's later messages only after the headers' answer, so a queue
 * that long is not Envoy's.
 */
export function extProcProcess(decider: Decider, opts: DoorOptions, log: Logger, maxQueued: number): BidiHandler<ProcessingRequest, object> {
  const answer = (d: Decision, r: RouteRequest, call: ServerCall<undefined, object>): void => call.write(decisionMessage(d, opts, r));
  return (call) => {
    // Answers must leave in request order; a readiness wait holds later answers behind it. Once the call
    // has ended (Envoy reset it, the deadline passed) call.write does nothing and call.signal has aborted.
    let queue: Promise<void> | undefined;
    let queued = 0;
    const handle = (msg: ProcessingRequest): Promise<void> | undefined => {
      if (msg.request !== 'request_headers') {
        call.write((msg.request !== undefined && PASS[msg.request]) || PASS.request_body!);
        return undefined;
      }
      let req: RouteRequest | undefined;
      try {
        req = headersToRoute(msg.request_headers?.headers?.headers);
        const x = decider.recorder?.begin('ext_proc', { method: req.headers[':method'] ?? '', target: req.path ?? '/', headers: req.headers, client: forwardedClient(req.headers, ''), peer: call.peer });
        return decider.decideAndAnswer('ext_proc', req, call, callSignal, answer, x);
      } catch (err) {
        log.error({ err }, 'ext_proc request_headers failed');
        call.write(denyMessage(deny('internal_error'), req?.headers.accept));
        return undefined;
      }
    };
    const track = (p: Promise<void>): void => {
      const q: Promise<void> = p.finally(() => {
        if (queue === q) queue = undefined;
      });
      queue = q;
    };
    return {
      message(msg, bytes) {
        if (queue === undefined) {
          const p = handle(msg);
          if (p !== undefined) track(p);
          return;
        }
        if (queued >= maxQueued || !call.hold(bytes)) {
          return call.fail(GrpcStatus.RESOURCE_EXHAUSTED, `ext_proc: more than ${queued} messages or their bytes queued behind a readiness wait`);
        }
        queued++;
        track(
          queue.then(() => {
            queued--;
            call.release(bytes);
            return handle(msg);
          }),
        );
      },
      halfClose() {
        // Envoy half-closed: answer what is in flight, then close our side.
        if (queue === undefined) call.end();
        else void queue.then(() => call.end());
      },
    };
  };
}
