import { sandboxHost, sandboxUpstream } from './sandboxes.js';

/** What Envoy sends for a browser's GET (15 headers), and sandgate's allow answers (which the bare baselines send as constants). */

export const UPSTREAM_HEADER = 'x-sandgate-upstream';

export function envoyHeaders(i: number, requestId: string): Record<string, string> {
  return {
    ':authority': sandboxHost(i),
    ':path': '/api/v1/files?path=%2Fhome%2Fuser',
    ':method': 'GET',
    ':scheme': 'https',
    'user-agent': 'Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36',
    accept: 'application/json',
    'accept-encoding': 'gzip, deflate, br',
    'accept-language': 'en-US,en;q=0.9',
    'sec-fetch-mode': 'cors',
    'sec-fetch-site': 'same-origin',
    cookie: 'session=3f9a6c1e2b7d4a58; theme=dark',
    'x-forwarded-for': '203.0.113.7',
    'x-forwarded-proto': 'https',
    'x-request-id': requestId,
    'x-envoy-expected-rq-timeout-ms': '15000',
  };
}

/** envoy.service.auth.v3.CheckRequest, as the ext_authz filter fills it (headers map, no body). */
export function checkRequest(i: number, requestId: string): object {
  const headers = envoyHeaders(i, requestId);
  return {
    attributes: {
      source: { address: { socket_address: { address: '203.0.113.7', port_value: 54321 } } },
      destination: { address: { socket_address: { address: '10.1.0.1', port_value: 443 } } },
      request: {
        time: { seconds: '1735689600', nanos: 0 },
        http: {
          id: requestId,
          method: 'GET',
          headers,
          path: headers[':path'],
          host: headers[':authority'],
          scheme: 'https',
          protocol: 'HTTP/2',
        },
      },
    },
  };
}

/** envoy.service.ext_proc.v3.ProcessingRequest with request_headers (values in raw_value, Envoy ≥ 1.27). */
export function processingRequest(i: number, requestId: string): object {
  const headers = envoyHeaders(i, requestId);
  return {
    request_headers: {
      headers: { headers: Object.entries(headers).map(([key, v]) => ({ key, raw_value: Buffer.from(v) })) },
      end_of_stream: true,
    },
  };
}

const OVERWRITE = 'OVERWRITE_IF_EXISTS_OR_ADD';

export function allowCheckResponse(i: number): object {
  const upstream = sandboxUpstream(i);
  return {
    status: { code: 0 },
    ok_response: { headers: [{ header: { key: UPSTREAM_HEADER, value: upstream }, append_action: OVERWRITE }], headers_to_remove: [] },
    dynamic_metadata: { fields: { upstream: { stringValue: upstream } } },
  };
}

export function allowProcessingResponse(i: number): object {
  return {
    request_headers: {
      response: {
        status: 'CONTINUE',
        header_mutation: { set_headers: [{ header: { key: UPSTREAM_HEADER, raw_value: Buffer.from(sandboxUpstream(i)) }, append_action: OVERWRITE }], remove_headers: [] },
        clear_route_cache: true,
      },
    },
  };
}
