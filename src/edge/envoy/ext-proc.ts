import { deny, type Allow, type Decision, type Deny } from '../../domain/decide.js';
import type { RouteRequest } from '../../domain/route-key.js';
import { callSignal, GrpcStatus, type BidiHandler, type MethodDefinition, type ServerCall } from '../../lib/grpc-h2-server.js';
import type { Logger } from '../../observability/logger.js';
import type { Decider } from '../decider.js';
import { renderDenial } from '../denial.js';
import { allowChanges, forwardedClient, type AllowNames, type DoorOptions } from '../headers.js';
import { externalProcessorService } from './protos.js';
import { decodeProcessingRequest, type ProcessingMessage } from './request-decoder.js';
import { encodeProcessContinue } from './response-encoder.js';
import { isSandgateSetCookie } from '../forwarding/forward-headers.js';

/**
 * Envoy ext_proc v3 (`envoy.service.ext_proc.v3.ExternalProcessor/Process`): one bidirectional stream per
 * HTTP request; every ProcessingRequest gets exactly one ProcessingResponse, in order.
 *
 * `request_headers` → a header mutation that sets the upstream header (values in `raw_value`: Envoy ≥ 1.27
 * sends and expects raw bytes) with `clear_route_cache: true` (so the route is re-picked on the header we
 * set; `x-sandgate-upstream-protocol: h2c` for a port declared h2c picks the HTTP/2 sandbox cluster), or
 * an `immediate_response` for a denial.
 *
 * `response_headers` (the shipped configs send them: `response_header_mode: SEND`) → a plain CONTINUE,
 * unless the sandbox's answer sets sandgate's session cookie: then a mutation that removes every
 * `set-cookie` and adds back the others, each as it came (a mutation removes a header by name, all its
 * values at once; removals apply before additions). Any other message kind — which the shipped
 * configurations do not send — gets a plain CONTINUE.
 */

const OVERWRITE = 'OVERWRITE_IF_EXISTS_OR_ADD' as const;
const CONTINUE = { status: 'CONTINUE' } as const;

let processDef: MethodDefinition<object, object> | undefined;

function protoProcess(): MethodDefinition<object, object> {
  processDef ??= externalProcessorService().service.Process! as MethodDefinition<object, object>;
  return processDef;
}

/** Process with the door's codecs: each message read by request-decoder.ts, the answers already bytes. */
export function processMethod(): MethodDefinition<ProcessingMessage, Buffer> {
  return { path: protoProcess().path, requestStream: true, responseStream: true, requestDeserialize: decodeProcessingRequest, responseSerialize: asIs };
}

function asIs(b: Buffer): Buffer {
  return b;
}

let pass: Readonly<Record<string, Buffer>> | undefined;

/** Plain CONTINUE answers by the message kind they answer, encoded once. */
function passAnswers(): Readonly<Record<string, Buffer>> {
  const encode = (m: object): Buffer => protoProcess().responseSerialize(m);
  pass ??= {
    request_body: encode({ request_body: { response: CONTINUE } }),
    response_headers: encode({ response_headers: { response: CONTINUE } }),
    response_body: encode({ response_body: { response: CONTINUE } }),
    request_trailers: encode({ request_trailers: {} }),
    response_trailers: encode({ response_trailers: {} }),
  };
  return pass;
}

function rawSet(key: string, value: string): object {
  return { header: { key, raw_value: Buffer.from(value, 'latin1') }, append_action: OVERWRITE };
}

/**
 * The answer to a sandbox's response headers that set cookies: CONTINUE, or the mutation that drops every
 * `Set-Cookie` of sandgate's cookie (forward-headers.ts isSandgateSetCookie, the rule of every carrier)
 * and keeps the rest byte for byte, in order. Kept lines are added with `append: true`: Envoy's ext_proc
 * reads that (wrapped) flag for an `append_action` left at its default, in every version that has either.
 */
function responseHeadersMessage(setCookies: readonly string[]): Buffer {
  let dropped = false;
  const kept: object[] = [];
  for (const v of setCookies) {
    if (isSandgateSetCookie('set-cookie', v)) dropped = true;
    else kept.push({ header: { key: 'set-cookie', raw_value: Buffer.from(v, 'latin1') }, append: { value: true } });
  }
  if (!dropped) return passAnswers().response_headers!;
  return protoProcess().responseSerialize({ response_headers: { response: { status: 'CONTINUE', header_mutation: { set_headers: kept, remove_headers: ['set-cookie'] } } } });
}

function allowMessage(d: Allow, opts: DoorOptions, req: RouteRequest): Buffer {
  const { set, remove } = allowChanges(d, opts, req.headers, ENVOY_NAMES);
  return encodeProcessContinue(set, remove ?? NONE);
}

const NONE: readonly string[] = Object.freeze([]);
const ENVOY_NAMES: AllowNames = { path: ':path' };

/** A denial, encoded by protobufjs: denials are not the path a busy gateway's CPU goes to. */
function denyMessage(d: Deny, accept: string | undefined, fetchMode?: string): Buffer {
  const r = renderDenial(d, accept, fetchMode);
  return protoProcess().responseSerialize({
    immediate_response: {
      status: { code: r.status },
      headers: { set_headers: r.headers.map(([k, v]) => rawSet(k, v)) },
      body: Buffer.from(r.body),
      details: d.code,
    },
  });
}

function decisionMessage(d: Decision, opts: DoorOptions, req: RouteRequest): Buffer {
  return d.allow ? allowMessage(d, opts, req) : denyMessage(d, req.headers.accept, req.headers['sec-fetch-mode']);
}

/**
 * `maxQueued`: messages one stream may queue behind a readiness wait; their bytes are held against the
 * stream's and the connection's buffer bounds (`call.hold`). Past either, the stream ends
 * RESOURCE_EXHAUSTED: Envoy sends a request's later messages only after the headers' answer, so a queue
 * that long is not Envoy's.
 */
export function extProcProcess(decider: Decider, opts: DoorOptions, log: Logger, maxQueued: number): BidiHandler<ProcessingMessage, Buffer> {
  const answer = (d: Decision, r: RouteRequest, call: ServerCall<undefined, Buffer>): void => call.write(decisionMessage(d, opts, r));
  return (call) => {
    // Answers must leave in request order; a readiness wait holds later answers behind it. Once the call
    // has ended (Envoy reset it, the deadline passed) call.write does nothing and call.signal has aborted.
    let queue: Promise<void> | undefined;
    let queued = 0;
    const handle = (msg: ProcessingMessage): Promise<void> | undefined => {
      const req = msg.route;
      if (msg.setCookies !== undefined) {
        call.write(responseHeadersMessage(msg.setCookies));
        return undefined;
      }
      if (req === undefined) {
        const answers = passAnswers();
        call.write((msg.request !== undefined && answers[msg.request]) || answers.request_body!);
        return undefined;
      }
      try {
        const x = decider.recorder?.begin('ext_proc', { method: req.headers[':method'] ?? '', target: req.path ?? '/', headers: req.headers, client: forwardedClient(req.headers, ''), peer: call.peer });
        return decider.decideAndAnswer('ext_proc', req, call, callSignal, answer, x);
      } catch (err) {
        log.error({ err }, 'ext_proc request_headers failed');
        call.write(denyMessage(deny('internal_error'), req.headers.accept));
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
