import { resolveConfig } from '../config/load.js';
import type { Config } from '../config/schema.js';
import { startDemo, type Demo } from '../demo/demo.js';
import { FileDriver } from '../drivers/file/file-driver.js';
import { startGateway } from '../gateway.js';

function wantsDemo(c: Config): boolean {
  return c.demo === 'on' || (c.demo === 'auto' && c.sandboxes === '' && c.drivers.length === 0 && !c.kubernetes);
}

/** `sandgate serve`: runs until SIGTERM/SIGINT, then shuts down gracefully within shutdownTimeoutMs. */
export async function serve(argv: readonly string[]): Promise<number> {
  let config = resolveConfig({ argv, env: process.env });
  let demo: Demo | undefined;
  if (wantsDemo(config)) {
    demo = await startDemo(config.supervisorAudience);
    config = resolveConfig({ argv, env: process.env, overrides: { sandboxes: demo.sandboxesPath } });
  }
  const gateway = await startGateway({ config, supervisorKeys: demo?.supervisorKeys });
  if (demo !== undefined) {
    if (gateway.supervisorPort !== undefined) await demo.startSupervisors(gateway.supervisorPort);
    gateway.log.info(
      { upstreams: demo.upstreams, try: `curl -i -H 'Host: 8000-web.team-a.${config.baseDomain}' http://127.0.0.1:${gateway.adminPort}/authz/` },
      'demo mode: example sandboxes from examples/demo-sandboxes.yaml',
    );
  }
  return new Promise<number>((resolve) => {
    let stopping = false;
    const stop = (signal: string): void => {
      if (stopping) return;
      stopping = true;
      gateway.log.info({ signal }, 'shutting down');
      const hard = setTimeout(() => {
        gateway.log.error('shutdown took too long; exiting');
        resolve(1);
      }, config.shutdownTimeoutMs + 2000);
      hard.unref();
      void gateway
        .close()
        .then(() => demo?.close())
        .then(() => {
          clearTimeout(hard);
          resolve(0);
        });
    };
    process.once('SIGTERM', () => stop('SIGTERM'));
    process.once('SIGINT', () => stop('SIGINT'));
    process.on('SIGHUP', () => {
      for (const d of gateway.drivers) if (d instanceof FileDriver) void d.reload();
    });
  });
}
