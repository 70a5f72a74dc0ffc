import { existsSync } from 'node:fs';
import http, { type IncomingMessage } from 'node:http';
import https from 'node:https';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { KubeConfig } from '@kubernetes/client-node';
import { SandgateError } from '../../domain/errors.js';

/**
 * The few Kubernetes API calls the drivers make — GET a collection page, open a watch stream, merge-patch
 * one object — over node:http(s). @kubernetes/client-node supplies the kubeconfig handling: server URL,
 * CA, client certificates, bearer tokens (refreshed per request for exec, OIDC and in-cluster token
 * files) and proxies, through `applyToHTTPSOptions`. Its own `Watch` is not used: it drops lines that do
 * not parse and hides the Status body of a failed watch (the 410 that must trigger a relist).
 */

/** A failed API call: the HTTP status (0 for transport failures) and the Status object's reason. */
export class KubeApiError extends Error {
  constructor(
    readonly status: number,
    /** metav1.Status `reason` (`Expired`, `Gone`, `Forbidden`, `NotFound`…) or a transport code. */
    readonly reason: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'KubeApiError';
  }
}

/** 410 Gone: the resourceVersion (or continue token) is older than the API server keeps. */
export function isGone(err: unknown): boolean {
  return err instanceof KubeApiError && err.status === 410;
}

/** The fields of a metav1.Status the drivers read. */
export interface KubeStatus {
  readonly code: number;
  readonly reason: string;
  readonly message: string;
}

export function readStatus(v: unknown): KubeStatus | undefined {
  if (typeof v !== 'object' || v === null) return undefined;
  const o = v as Record<string, unknown>;
  if (o.kind !== 'Status' && typeof o.code !== 'number') return undefined;
  return {
    code: typeof o.code === 'number' ? o.code : 0,
    reason: typeof o.reason === 'string' ? o.reason : '',
    message: typeof o.message === 'string' ? o.message : '',
  };
}

/**
 * Loads the kubeconfig: an explicit file, else `KUBECONFIG` (colon-separated files, merged), else the
 * in-cluster service account (`KUBERNETES_SERVICE_HOST`), else `~/.kube/config`. Throws `config_invalid`.
 */
export function loadKubeConfig(path?: string): KubeConfig {
  const kc = new KubeConfig();
  try {
    if (path !== undefined && path !== '') kc.loadFromFile(path);
    else if ((process.env.KUBECONFIG ?? '') !== '') kc.loadFromDefault();
    else if ((process.env.KUBERNETES_SERVICE_HOST ?? '') !== '') kc.loadFromCluster();
    else if (existsSync(join(homedir(), '.kube', 'config'))) kc.loadFromFile(join(homedir(), '.kube', 'config'));
    else throw new Error('no kubeconfig: pass --kubeconfig, set KUBECONFIG, or run in a cluster');
  } catch (err) {
    throw new SandgateError('config_invalid', `cannot load the kubeconfig: ${(err as Error).message}`, { cause: err });
  }
  if (kc.getCurrentCluster() === null) throw new SandgateError('config_invalid', 'the kubeconfig has no current cluster');
  return kc;
}

/** A kubeconfig for one API server URL (tests, and plain-HTTP proxies such as `kubectl proxy`). */
export function kubeConfigForServer(server: string, token?: string): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'c', server, skipTLSVerify: server.startsWith('http:') }],
    users: [token === undefined ? { name: 'u' } : { name: 'u', token }],
    contexts: [{ name: 'ctx', cluster: 'c', user: 'u' }],
    currentContext: 'ctx',
  });
  return kc;
}

export interface KubeClientOptions {
  /** Bound on a list page or patch, in milliseconds. */
  readonly requestTimeoutMs: number;
  /** Largest response body read whole (a list page), in bytes. */
  readonly maxBodyBytes: number;
}

export const DEFAULT_CLIENT_OPTIONS: KubeClientOptions = { requestTimeoutMs: 30_000, maxBodyBytes: 64 * 1024 * 1024 };

type Query = Readonly<Record<string, string | undefined>>;

function readBody(res: IncomingMessage, limit: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    let size = 0;
    res.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        res.destroy(new KubeApiError(0, 'BodyTooLarge', `response body exceeds ${limit} bytes`));
        return;
      }
      parts.push(chunk);
    });
    res.once('end', () => resolve(Buffer.concat(parts)));
    res.once('error', reject);
    res.once('close', () => {
      if (!res.complete) reject(new KubeApiError(0, 'ConnectionDropped', 'the connection closed before the response was complete'));
    });
  });
}

async function failure(res: IncomingMessage, what: string): Promise<KubeApiError> {
  const status = res.statusCode ?? 0;
  let parsed: KubeStatus | undefined;
  try {
    parsed = readStatus(JSON.parse((await readBody(res, 64 * 1024)).toString('utf8')));
  } catch {
    parsed = undefined;
  }
  const reason = parsed?.reason || http.STATUS_CODES[status] || 'Error';
  return new KubeApiError(status, reason, `${what}: HTTP ${status} ${reason}${parsed?.message ? `: ${parsed.message}` : ''}`);
}

export class KubeClient {
  readonly opts: KubeClientOptions;

  constructor(
    readonly kubeConfig: KubeConfig,
    opts: Partial<KubeClientOptions> = {},
  ) {
    this.opts = { ...DEFAULT_CLIENT_OPTIONS, ...opts };
  }

  /** The API server's URL, for logs. */
  get server(): string {
    return this.kubeConfig.getCurrentCluster()?.server ?? '';
  }

  /** GETs a JSON document (a collection page). */
  async getJson(path: string, query: Query, signal: AbortSignal): Promise<unknown> {
    const res = await this.send('GET', path, query, undefined, signal, { timeoutMs: this.opts.requestTimeoutMs });
    const body = await readBody(res, this.opts.maxBodyBytes);
    try {
      return JSON.parse(body.toString('utf8')) as unknown;
    } catch (err) {
      throw new KubeApiError(0, 'InvalidJSON', `GET ${path}: the response is not JSON`, { cause: err });
    }
  }

  /** Applies an RFC 7386 JSON merge patch to one object (`Content-Type: application/merge-patch+json`). */
  async mergePatch(path: string, patch: unknown, signal: AbortSignal = new AbortController().signal): Promise<void> {
    const res = await this.send('PATCH', path, {}, JSON.stringify(patch), signal, { timeoutMs: this.opts.requestTimeoutMs });
    await readBody(res, this.opts.maxBodyBytes);
  }

  /**
   * Opens a watch: resolves with the streaming response once the server answered 200. `idleMs` bounds
   * the silence on the socket (a half-open connection sends nothing, not even an error).
   */
  openStream(path: string, query: Query, signal: AbortSignal, idleMs: number): Promise<IncomingMessage> {
    return this.send('GET', path, query, undefined, signal, { idleMs });
  }

  private async send(
    method: 'GET' | 'PATCH',
    path: string,
    query: Query,
    body: string | undefined,
    signal: AbortSignal,
    limits: { readonly timeoutMs?: number; readonly idleMs?: number },
  ): Promise<IncomingMessage> {
    const what = `${method} ${path}`;
    const server = this.server;
    if (server === '') throw new KubeApiError(0, 'NoCluster', 'the kubeconfig has no current cluster');
    const url = new URL(server.replace(/\/+$/, '') + path);
    for (const [k, v] of Object.entries(query)) if (v !== undefined) url.searchParams.set(k, v);
    const headers: Record<string, string> = { Accept: 'application/json', 'User-Agent': 'sandgate' };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/merge-patch+json';
      headers['Content-Length'] = String(Buffer.byteLength(body));
    }
    const opts: https.RequestOptions = { method, headers };
    try {
      await this.kubeConfig.applyToHTTPSOptions(opts);
    } catch (err) {
      throw new KubeApiError(0, 'AuthFailed', `${what}: cannot apply the kubeconfig credentials: ${(err as Error).message}`, { cause: err });
    }
    const agent = opts.agent;
    signal.throwIfAborted();
    return new Promise<IncomingMessage>((resolve, reject) => {
      const req = (url.protocol === 'https:' ? https : http).request(url, { ...opts, signal });
      const timer =
        limits.timeoutMs === undefined
          ? undefined
          : setTimeout(() => req.destroy(new KubeApiError(0, 'Timeout', `${what}: no complete answer within ${limits.timeoutMs} ms`)), limits.timeoutMs);
      req.once('close', () => {
        clearTimeout(timer);
        // The kubeconfig makes a fresh agent per call (credentials may rotate): it must not outlive the call.
        if (agent instanceof http.Agent) agent.destroy();
      });
      if (limits.idleMs !== undefined) {
        const idleMs = limits.idleMs;
        req.setTimeout(idleMs, () => req.destroy(new KubeApiError(0, 'Idle', `${what}: no data for ${idleMs} ms`)));
      }
      // `on`, not `once`: a destroyed request can report more than one error, and a second one unheard
      // would crash the process.
      req.on('error', (err: Error) => reject(err instanceof KubeApiError ? err : transportError(what, err, signal)));
      req.once('response', (res) => {
        res.on('error', () => undefined);
        res.socket?.setKeepAlive(true, 30_000);
        const status = res.statusCode ?? 0;
        if (status >= 200 && status < 300) {
          resolve(res);
          return;
        }
        failure(res, what).then(reject, reject);
      });
      req.end(body);
    });
  }
}

function transportError(what: string, err: Error, signal: AbortSignal): KubeApiError {
  if (signal.aborted) return new KubeApiError(0, 'Aborted', `${what}: aborted`, { cause: err });
  const code = (err as NodeJS.ErrnoException).code ?? 'TransportError';
  return new KubeApiError(0, code, `${what}: ${err.message}`, { cause: err });
}
