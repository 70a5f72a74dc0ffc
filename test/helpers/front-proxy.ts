import type { RequestListener } from 'node:http';
import { pino } from 'pino';
import type { BackendSnapshot } from '../../src/domain/sandbox.js';
import type { RouteOptions } from '../../src/domain/route-key.js';
import { Decider } from '../../src/edge/decider.js';
import { EmbeddedProxy, type ProxyOptions } from '../../src/edge/proxy/http-proxy.js';
import { GatewayMetrics } from '../../src/observability/metrics.js';
import { SandboxView } from '../../src/view/sandbox-view.js';
import { snapshot } from './snapshots.js';
import { startUpstream } from './upstream.js';

export const FRONT_ROUTE: RouteOptions = { order: ['headers', 'host', 'path'], baseDomain: 'localhost', defaultNamespace: 'default', defaultPort: 80, pathPrefix: '' };

/** An embedded proxy on a loopback port over a view of `sandboxes` (file driver `test`), no readiness wait; `opts` override its options. */
export async function startFrontProxy(sandboxes: readonly BackendSnapshot[], opts: Partial<ProxyOptions> = {}): Promise<EmbeddedProxy> {
  const log = pino({ level: 'silent' });
  const view = new SandboxView({ waiters: { perSandbox: 10, total: 100 } });
  view.registerDriver('test');
  view.replace('test', sandboxes);
  const decider = new Decider({ view, route: FRONT_ROUTE, readinessWaitMs: 0, metrics: new GatewayMetrics(view, false), log });
  const proxy = new EmbeddedProxy(
    decider,
    { host: '127.0.0.1', port: 0, upstreamHeader: 'x-sandgate-upstream', stripHeaders: [], stripOriginOnUpgrade: false, connectTimeoutMs: 2000, headersTimeoutMs: 5000, idleTimeoutMs: 30_000, ...opts },
    log,
  );
  await proxy.start();
  return proxy;
}

/** A front proxy in front of one upstream: sandbox team-a/web routes to it. */
export interface FrontOverUpstream {
  readonly proxy: EmbeddedProxy;
  readonly upstream: Awaited<ReturnType<typeof startUpstream>>;
  /** The Host that names web on the upstream's port. */
  readonly host: string;
  close(): Promise<void>;
}

/** An upstream answering with `handler` and a startFrontProxy() over sandbox team-a/web on 127.0.0.1, and `more`. */
export async function startFrontOverUpstream(handler: RequestListener, more: readonly BackendSnapshot[] = []): Promise<FrontOverUpstream> {
  const upstream = await startUpstream(handler);
  const proxy = await startFrontProxy([snapshot({ name: 'web', sessionModel: 'none', endpoint: { kind: 'address', addresses: ['127.0.0.1'] } }), ...more]);
  return {
    proxy,
    upstream,
    host: `${upstream.port}-web.team-a.localhost`,
    async close() {
      await proxy.close(100);
      await upstream.close();
    },
  };
}
