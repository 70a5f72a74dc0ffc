import { deny, type Allow, type Decision, type Deny } from '../../domain/decide.js';
import { GRPC_STATUS } from '../../domain/errors.js';
import type { RouteRequest } from '../../domain/route-key.js';
import { callSignal, type ServerCall, type UnaryHandler } from '../../lib/grpc-h2-server.js';
import type { Logger } from '../../observability/logger.js';
import type { Decider } from '../decider.js';
import { renderDenial } from '../denial.js';
import { cookieForSandbox, headersToRemove, lowerCaseHeaders, UPSTREAM_PROTOCOL_HEADER, upstreamIsH2c, type DoorOptions } from '../headers.js';
import { relayHeaders } from '../relay/relay-headers.js';

/**
 * Envoy ext_authz v3 (`envoy.service.auth.v3.Authorization/Check`). Allow → `ok_response` that sets the
 * upstream header with OVERWRITE_IF_EXISTS_OR_ADD (the default action appends, and a client-sent value
 * would survive), removes client-sent routing headers, and puts `{upstream}` in dynamic metadata (the
 * `envoy.filters.http.ext_authz` namespace, for ORIGINAL_DST `metadata_key`). For a port declared h2c it
 * also sets `x-sandgate-upstream-protocol: h2c`, which the configs' route matches (with the filter's
 * `clear_route_cache`) to pick the HTTP/2 sandbox cluster. Deny → `denied_response`.
 */

interface HeaderValueOption {
  header: { key: string; value: string };
  append_action: 'OVERWRITE_IF_EXISTS_OR_ADD';
}

interface CheckRequest {
  attributes?: {
    source?: { address?: { socket_address?: { address?: string; port_value?: number } } };
    request?: {
      http?: {
        headers?: Record<string, string>;
        header_map?: { headers?: { key: string; value?: string; raw_value?: Buffer }[] };
        host?: string;
        path?: string;
        method?: string;
        scheme?: string;
      };
    };
  };
}

const OVERWRITE = 'OVERWRITE_IF_EXISTS_OR_ADD' as const;

function set(key: string, value: string): HeaderValueOption {
  return { header: { key, value }, append_action: OVERWRITE };
}

/** Builds the RouteRequest from what Envoy sends: the `headers` map, or `header_map` with `encode_raw_headers`. */
export function checkRequestToRoute(req: CheckRequest): RouteRequest {
  const http = req.attributes?.request?.http;
  let headers: Record<string, string> = http?.headers ?? {};
  const list = http?.header_map?.headers;
  if (list !== undefined && list.length > 0) {
    headers = {};
    for (const h of list) {
      const v = h.raw_value !== undefined && h.raw_value.length > 0 ? h.raw_value.toString('latin1') : (h.value ?? '');
      const k = h.key.toLowerCase();
      headers[k] = headers[k] === undefined ? v : headers[k] + ',' + v;
    }
  }
  const lower = lowerCaseHeaders(headers);
  const scheme = http?.scheme || lower[':scheme'];
  return { headers: lower, host: http?.host || lower[':authority'] || lower.host, path: http?.path || lower[':path'], method: http?.method || lower[':method'], secure: scheme === 'https' };
}

export function allowResponse(d: Allow, opts: DoorOptions, req: RouteRequest): object {
  const headers = [set(opts.upstreamHeader, d.upstream)];
  if (upstreamIsH2c(d)) headers.push(set(UPSTREAM_PROTOCOL_HEADER, 'h2c'));
  if (d.target.path !== undefined) headers.push(set(':path', d.target.path));
  for (const [k, v] of relayHeaders(d, opts.relay)) headers.push(set(k, v));
  const cookie = cookieForSandbox(opts, req.headers);
  if (cookie !== undefined && cookie !== '') headers.push(set('cookie', cookie));
  let remove = headersToRemove(req.headers, opts.removeHeaders, headers.map((h) => h.header.key));
  if (cookie === '') (remove ??= []).push('cookie');
  return {
    status: { code: GRPC_STATUS.allow },
    ok_response: { headers, headers_to_remove: remove ?? [] },
    dynamic_metadata: { fields: { upstream: { stringValue: d.upstream } } },
  };
}

export function deniedResponse(d: Deny, accept: string | undefined, fetchMode?: string): object {
  const r = renderDenial(d, accept, fetchMode);
  return {
    status: { code: GRPC_STATUS.deny, message: d.code },
    denied_response: { status: { code: r.status }, headers: r.headers.map(([k, v]) => set(k, v)), body: r.body },
  };
}

export function extAuthzCheck(decider: Decider, opts: DoorOptions, log: Logger): UnaryHandler<CheckRequest, object> {
  const answer = (d: Decision, r: RouteRequest, call: ServerCall<CheckRequest, object>): void =>
    call.end(d.allow ? allowResponse(d, opts, r) : deniedResponse(d, r.headers.accept, r.headers['sec-fetch-mode']));
  return (call) => {
    let req: RouteRequest | undefined;
    try {
      req = checkRequestToRoute(call.request);
      const x = decider.recorder?.begin('ext_authz', { method: call.request.attributes?.request?.http?.method ?? '', target: req.path ?? '/', headers: req.headers, client: sourceAddress(call.request), peer: call.peer });
      void decider.decideAndAnswer('ext_authz', req, call, callSignal, answer, x);
    } catch (err) {
      log.error({ err }, 'ext_authz Check failed');
      call.end(deniedResponse(deny('internal_error'), req?.headers.accept));
    }
  };
}

/** The downstream client's `address:port`, as Envoy reports it in `attributes.source`. */
function sourceAddress(req: CheckRequest): string {
  const a = req.attributes?.source?.address?.socket_address;
  if (a?.address === undefined) return '';
  return a.port_value === undefined ? a.address : `${a.address}:${a.port_value}`;
}
