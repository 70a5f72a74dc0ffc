import { readFileSync } from 'node:fs';
import { SupervisorClient } from '../../src/sessions/supervisor-client.js';
import { mintSupervisorToken, parseSupervisorKeys } from '../../src/sessions/supervisor-token.js';
import { announceReady, exitWithParent, serveIpc } from './ipc.js';
import { sandboxName, sandboxNamespace } from './sandboxes.js';

/** Reference supervisors, one per sandbox, each with the same list of gateways: when the first dies, each reconnects to the next. */

export interface Accepted {
  readonly count: number;
  readonly lastAt: number;
  readonly closes: Record<string, number>;
}

const supervisors: { readonly client: SupervisorClient; acceptedAt: number }[] = [];
const closes = new Map<number, number>();

/** Returns when the supervisors started (epoch ms), after every token is minted. */
async function open(a: { gateways: string[]; secretFile: string; from: number; count: number }): Promise<number> {
  const keys = { keys: parseSupervisorKeys(readFileSync(a.secretFile, 'utf8'), 'bench secret'), audience: 'sandgate-supervisor' };
  for (let i = a.from; i < a.from + a.count; i++) {
    const [namespace, name] = [sandboxNamespace(i), sandboxName(i)];
    const client = new SupervisorClient({ gateway: a.gateways, token: await mintSupervisorToken(keys, namespace, name, 3600), namespace, name, instanceId: `bench-${i}`, relay: false });
    const s = { client, acceptedAt: 0 };
    client.on('accepted', () => (s.acceptedAt = Date.now()));
    client.on('disconnected', ({ code }: { code: number }) => closes.set(code, (closes.get(code) ?? 0) + 1));
    supervisors.push(s);
  }
  const startedAt = Date.now();
  for (const s of supervisors) s.client.start();
  return startedAt;
}

function accepted(a: { sinceMs: number }): Accepted {
  const fresh = supervisors.filter((s) => s.client.state === 'connected' && s.acceptedAt >= a.sinceMs);
  return { count: fresh.length, lastAt: fresh.reduce((t, s) => Math.max(t, s.acceptedAt), 0), closes: Object.fromEntries(closes) };
}

exitWithParent();
serveIpc({
  open,
  accepted,
  close: () => supervisors.forEach((s) => s.client.stop()),
});
announceReady({ pid: process.pid });
