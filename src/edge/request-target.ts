import { deny, type Deny } from '../domain/decide.js';

/**
 * The request target and Host of an HTTP/1.1 request as a door must read them (RFC 9112 §3.2, §3.2.2):
 *
 * - **origin-form** (`/path?query`) and asterisk-form (`*`) pass as they are, with the Host header;
 * - **absolute-form** (`http://authority/path`) names its own authority, which wins over Host: the door
 *   routes on it and forwards origin-form. A Host that disagrees is refused (400 `invalid_route`) rather
 *   than silently overridden, since the sandbox would see the other Host;
 * - **more than one Host** (RFC 9112 §3.2: "a server MUST respond with a 400") is refused, never routed
 *   on the first and forwarded twice.
 */

export interface RequestTarget {
  /** The authority to route on: the absolute-form's, else the Host header. */
  readonly host: string | undefined;
  /** Origin-form (or `*`): what is forwarded. */
  readonly path: string;
}

const ABSOLUTE = /^([A-Za-z][A-Za-z0-9+.-]*):\/\/([^/?#]*)([^#]*)$/;

/** Reads the target from the request line and the raw header list (Node's `rawHeaders`). */
export function requestTarget(url: string | undefined, rawHeaders: readonly string[]): RequestTarget | Deny {
  const host = singleHost(rawHeaders);
  return typeof host === 'object' ? host : originForm(url ?? '/', host);
}

/** The Host header's value (undefined without one), or the 400 a request with more than one gets. */
export function singleHost(rawHeaders: readonly string[]): string | undefined | Deny {
  let host: string | undefined;
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i]!;
    if (name.length === 4 && name.toLowerCase() === 'host') {
      if (host !== undefined) return deny('invalid_route', 'The request has more than one Host header');
      host = rawHeaders[i + 1]!;
    }
  }
  return host;
}

/** Normalizes a target given the (single) Host; absolute-form → its authority and origin-form path. */
export function originForm(target: string, host: string | undefined): RequestTarget | Deny {
  if (target.startsWith('/') || target === '*') return { host, path: target };
  const m = ABSOLUTE.exec(target);
  if (m === null) return deny('invalid_route', 'The request target must be origin-form (/path) or absolute-form (http://host/path)');
  const [, scheme, authority, rest] = m as unknown as [string, string, string, string];
  const s = scheme.toLowerCase();
  if ((s !== 'http' && s !== 'https' && s !== 'ws' && s !== 'wss') || authority === '' || authority.includes('@')) {
    return deny('invalid_route', 'An absolute-form target must be http(s)://host/path without user info');
  }
  if (host !== undefined && host.toLowerCase() !== authority.toLowerCase()) {
    return deny('invalid_route', 'The Host header does not match the authority of the absolute-form request target');
  }
  return { host: authority, path: rest === '' ? '/' : rest.startsWith('?') ? '/' + rest : rest };
}

/** True for the denial arm of requestTarget()/originForm(). */
export function isDeny<T extends object>(t: T | Deny): t is Deny {
  return 'allow' in t;
}
