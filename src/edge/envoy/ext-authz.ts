import { deny, type Allow, type Decision, type Deny } from '../../domain/decide.js';
import { GRPC_STATUS } from '../../domain/errors.js';
import type { RouteRequest } from '../../domain/route-key.js';
import { callSignal, type MethodDefinition, type ServerCall, type UnaryHandler } from '../../lib/grpc-h2-server.js';
import type { Logger } from '../../observability/logger.js';
import type { Decider } from '../decider.js';
import { renderDenial } from '../denial.js';
import { allowChanges, type AllowNames, type DoorOptions } from '../headers.js';
import { authorizationService } from './protos.js';
import { decodeCheckRequest, type CheckAttributes } from './request-decoder.js';
import { encodeCheckAllow } from './response-encoder.js';

/**
 * Envoy ext_authz v3 (`envoy.service.auth.v3.Authorization/Check`). Allow → `ok_response` that sets the
 * upstream header with OVERWRITE_IF_EXISTS_OR_ADD (the default action appends, and a client-sent value
 * would survive), removes client-sent routing headers, and puts `{upstream}` in dynamic metadata (the
 * `envoy.filters.http.ext_authz` namespace, for ORIGINAL_DST `metadata_key`). For a port declared h2c it
 * also sets `x-sandgate-upstream-protocol: h2c`, which the configs' route matches (with the filter's
 * `clear_route_cache`) to pick the HTTP/2 sandbox cluster. Deny → `denied_response`.
 */

const OVERWRITE = 'OVERWRITE_IF_EXISTS_OR_ADD' as const;

function set(key: string, value: string): { header: { key: string; value: string }; append_action: typeof OVERWRITE } {
  return { header: { key, value }, append_action: OVERWRITE };
}

let check: MethodDefinition<object, object> | undefined;

function protoCheck(): MethodDefinition<object, object> {
  check ??= authorizationService().service.Check! as MethodDefinition<object, object>;
  return check;
}

/** Check with the door's codecs: the request read by request-decoder.ts, the answers already bytes. */
export function checkMethod(): MethodDefinition<CheckAttributes, Buffer> {
  return { path: protoCheck().path, requestStream: false, responseStream: false, requestDeserialize: decodeCheckRequest, responseSerialize: asIs };
}

function asIs(b: Buffer): Buffer {
  return b;
}

/** The allow answer, encoded (response-encoder.ts). */
export function allowResponse(d: Allow, opts: DoorOptions, req: RouteRequest): Buffer {
  const { set, remove } = allowChanges(d, opts, req.headers, ENVOY_NAMES);
  return encodeCheckAllow(d.upstream, set, remove ?? NONE);
}

const NONE: readonly string[] = Object.freeze([]);
const ENVOY_NAMES: AllowNames = { path: ':path' };

/** A denial, encoded by protobufjs: denials are not the path a busy gateway's CPU goes to. */
export function deniedResponse(d: Deny, accept: string | undefined, fetchMode?: string): Buffer {
  const r = renderDenial(d, accept, fetchMode);
  return protoCheck().responseSerialize({
    status: { code: GRPC_STATUS.deny, message: d.code },
    denied_response: { status: { code: r.status }, headers: r.headers.map(([k, v]) => set(k, v)), body: r.body },
  });
}

export function extAuthzCheck(decider: Decider, opts: DoorOptions, log: Logger): UnaryHandler<CheckAttributes, Buffer> {
  const answer = (d: Decision, r: RouteRequest, call: ServerCall<CheckAttributes, Buffer>): void =>
    call.end(d.allow ? allowResponse(d, opts, r) : deniedResponse(d, r.headers.accept, r.headers['sec-fetch-mode']));
  return (call) => {
    let req: CheckAttributes | undefined;
    try {
      req = call.request;
      const x = decider.recorder?.begin('ext_authz', { method: req.httpMethod, target: req.path ?? '/', headers: req.headers, client: req.client, peer: call.peer });
      void decider.decideAndAnswer('ext_authz', req, call, callSignal, answer, x);
    } catch (err) {
      log.error({ err }, 'ext_authz Check failed');
      call.end(deniedResponse(deny('internal_error'), req?.headers.accept));
    }
  };
}

