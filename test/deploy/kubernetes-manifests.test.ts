import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parse, parseAllDocuments } from 'yaml';
import { resolveConfig } from '../../src/config/load.js';
import { flagOf, SCHEMA, type Config } from '../../src/config/schema.js';
import { KUBE_KINDS } from '../../src/drivers/kubernetes/kubernetes-driver.js';
import { connectionManagers, contractProblems, envoyProtoProblems, list, obj, socketAddresses, type Obj } from '../helpers/envoy-check.js';
import { kubeSchemaProblems } from '../helpers/kube-schema.js';

/**
 * deploy/kubernetes, validated the way CI for Kubernetes manifests does it, without a cluster: every
 * kustomization is built with `kubectl kustomize`, every object is checked strictly against the Kubernetes
 * OpenAPI schemas (unknown fields fail), and the objects are cross-checked against sandgate itself: the
 * container's flags and configuration file resolve through sandgate's own configuration loader, container
 * ports and probes match the listeners that configuration opens, Services reach real container ports, the
 * Envoy ConfigMap holds envoy/*.yaml byte for byte and passes the same checks as envoy/, the Secret keys
 * mounted exist in the example Secret, and the sandbox NetworkPolicies admit exactly the gateway's pods.
 * (The RBAC verbs are checked against the drivers' real requests in test/kubernetes/driver-rbac.test.ts,
 * the metric names in the alerts and the dashboard in test/deploy/monitoring-metrics.test.ts.)
 */

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const DEPLOY = join(ROOT, 'deploy', 'kubernetes');
const PACKAGE_VERSION = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;

/** Why the kustomize builds cannot run here, or undefined when they can. */
function kustomizeUnavailable(): string | undefined {
  const r = spawnSync('kubectl', ['version', '--client', '-o', 'json'], { encoding: 'utf8' });
  if (r.error !== undefined) return 'kubectl is not installed (.ci/run installs it)';
  let reported: { kustomizeVersion?: string; clientVersion?: { minor?: string } } = {};
  try {
    reported = JSON.parse(r.stdout) as typeof reported;
  } catch {
    return `kubectl version does not answer JSON: ${r.stderr.trim()}`;
  }
  // kubectl reports its kustomize from 1.24 on; 1.21–1.23 embed kustomize v4, 1.14–1.20 kustomize v2.0.3.
  const minor = Number(/^\d+/.exec(reported.clientVersion?.minor ?? '')?.[0] ?? 0);
  const major = reported.kustomizeVersion === undefined ? (minor >= 21 ? 4 : 2) : Number(/^v?(\d+)\./.exec(reported.kustomizeVersion)?.[1] ?? 0);
  if (major < 4) {
    return `kubectl 1.${minor} embeds kustomize ${reported.kustomizeVersion ?? 'v2'}, too old for these kustomizations (they need kustomize ≥ v4: kubectl ≥ 1.21)`;
  }
  return undefined;
}

const UNAVAILABLE = kustomizeUnavailable();
if (UNAVAILABLE !== undefined) process.stderr.write(`deploy/kubernetes builds skipped: ${UNAVAILABLE}\n`);

type K8sObject = Obj & { apiVersion: string; kind: string; metadata: Obj & { name: string; namespace?: string; labels?: Record<string, string> } };

function build(dir: string): { objects: K8sObject[]; stderr: string } {
  const r = spawnSync('kubectl', ['kustomize', join(DEPLOY, dir)], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  if (r.status !== 0) throw new Error(`kubectl kustomize ${dir} failed: ${r.stderr}`);
  const objects = parseAllDocuments(r.stdout).map((d) => d.toJS() as K8sObject);
  return { objects, stderr: r.stderr };
}

const OVERLAYS = readdirSync(join(DEPLOY, 'overlays')).sort();
const BUILDS = ['base', ...OVERLAYS.map((o) => `overlays/${o}`), 'sandbox-isolation', 'monitoring'];
const built = new Map<string, { objects: K8sObject[]; stderr: string }>();
function objectsOf(dir: string): K8sObject[] {
  if (!built.has(dir)) built.set(dir, build(dir));
  return built.get(dir)!.objects;
}

// ---- Plain-data access ----

const str = (v: unknown): string => (typeof v === 'string' ? v : '');
const ofKind = (objs: readonly K8sObject[], kind: string): K8sObject[] => objs.filter((o) => o.kind === kind);
const named = (objs: readonly K8sObject[], kind: string, name: string): K8sObject | undefined => objs.find((o) => o.kind === kind && o.metadata.name === name);
const podSpec = (d: K8sObject): Obj => obj(obj(obj(d.spec).template).spec);
const podLabels = (d: K8sObject): Record<string, string> => obj(obj(obj(d.spec).template).metadata).labels as Record<string, string>;
const containers = (d: K8sObject): Obj[] => list(podSpec(d).containers).map(obj);
const container = (d: K8sObject, name: string): Obj => {
  const c = containers(d).find((x) => x.name === name);
  if (c === undefined) throw new Error(`${d.metadata.name} has no container ${name}`);
  return c;
};
const containerPorts = (c: Obj): { name: string; port: number }[] => list(c.ports).map((p) => ({ name: str(obj(p).name), port: Number(obj(p).containerPort) }));

/** A Kubernetes label selector (matchLabels and matchExpressions) against a label set. */
function selects(selector: unknown, labels: Readonly<Record<string, string>> | undefined): boolean {
  const s = obj(selector);
  const l = labels ?? {};
  const byLabels = Object.entries(obj(s.matchLabels)).every(([k, v]) => l[k] === v);
  const byExpressions = list(s.matchExpressions).every((e) => {
    const { key, operator, values } = obj(e) as { key: string; operator: string; values?: string[] };
    if (operator === 'Exists') return key in l;
    if (operator === 'DoesNotExist') return !(key in l);
    if (operator === 'In') return key in l && (values ?? []).includes(l[key]!);
    if (operator === 'NotIn') return !(key in l) || !(values ?? []).includes(l[key]!);
    return false;
  });
  return byLabels && byExpressions;
}

/** A Service port's or probe's port (a number or a container port name) as a number in `c`, or undefined. */
function portIn(c: Obj, port: unknown): number | undefined {
  if (typeof port === 'number') return containerPorts(c).some((p) => p.port === port) ? port : undefined;
  return containerPorts(c).find((p) => p.name === port)?.port;
}

/** The CPU of a quantity ("1", "1500m") in cores. */
function cores(q: unknown): number {
  const s = String(q);
  return s.endsWith('m') ? Number(s.slice(0, -1)) / 1000 : Number(s);
}

// ---- sandgate's effective configuration in a Deployment ----

const FIELD_SAMPLES: Readonly<Record<string, string>> = { 'metadata.name': 'sandgate-7d9f-abcde', 'status.podIP': '10.1.2.3', 'metadata.namespace': 'sandgate-system' };

/** `$(VAR)` references in args, expanded as the kubelet does from the container's env. */
function expand(arg: string, env: Readonly<Record<string, string>>): string {
  return arg.replace(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (whole, name: string) => env[name] ?? whole);
}

interface Gateway {
  readonly deployment: K8sObject;
  readonly container: Obj;
  readonly args: string[];
  readonly env: Record<string, string>;
  readonly config: Config;
  /** The file behind a path inside a mounted ConfigMap or Secret, or undefined. */
  mounted(path: string): { kind: 'configMap' | 'secret'; name: string; key: string; text?: string } | undefined;
}

function gatewayOf(objs: readonly K8sObject[]): Gateway {
  const deployment = named(objs, 'Deployment', 'sandgate');
  if (deployment === undefined) throw new Error('no Deployment sandgate');
  const c = container(deployment, 'sandgate');
  const env: Record<string, string> = {};
  for (const e of list(c.env).map(obj)) {
    const field = str(obj(obj(e.valueFrom).fieldRef).fieldPath);
    env[str(e.name)] = typeof e.value === 'string' ? e.value : (FIELD_SAMPLES[field] ?? `<${field}>`);
  }
  const args = list(c.args).map((a) => expand(String(a), env));
  const volumes = list(podSpec(deployment).volumes).map(obj);
  const mounted: Gateway['mounted'] = (path) => {
    for (const m of list(c.volumeMounts).map(obj)) {
      const dir = str(m.mountPath).replace(/\/$/, '');
      if (dirname(path) !== dir) continue;
      const v = volumes.find((x) => x.name === m.name);
      const key = basename(path);
      if (v?.configMap !== undefined) {
        const name = str(obj(v.configMap).name);
        const data = obj(named(objs, 'ConfigMap', name)?.data);
        return { kind: 'configMap', name, key, ...(typeof data[key] === 'string' ? { text: data[key] } : {}) };
      }
      if (v?.secret !== undefined) {
        const items = list(obj(v.secret).items).map(obj);
        const item = items.find((i) => i.path === key);
        if (items.length > 0 && item === undefined) return undefined;
        return { kind: 'secret', name: str(obj(v.secret).secretName), key: item === undefined ? key : str(item.key) };
      }
    }
    return undefined;
  };
  const config = resolveConfig({
    argv: args.filter((a) => a !== 'serve'),
    env: Object.fromEntries(Object.entries(env).filter(([k]) => k.startsWith('SANDGATE_'))),
    readFile: (path) => {
      const m = mounted(path);
      if (m?.text === undefined) throw new Error(`${path} is not a file of a mounted ConfigMap`);
      return m.text;
    },
  });
  return { deployment, container: c, args, env, config, mounted };
}

/** The listeners sandgate opens with `c`, by the container port name the manifests give them. */
function listeners(c: Config): Record<string, number> {
  const out: Record<string, number> = { grpc: c.grpcPort, admin: c.adminPort, relay: c.relayPort };
  if (c.opsPort >= 0) out.ops = c.opsPort;
  if (c.proxy) out.proxy = c.proxyPort;
  if (c.supervisorSecret !== '' || c.supervisorSecretFile !== '' || c.demo === 'on') out.supervisor = c.supervisorPort;
  return out;
}

/** The listener of /metrics, /healthz and /readyz: the ops port when it is on, else the admin port. */
const opsListener = (c: Config): number => (c.opsPort >= 0 ? c.opsPort : c.adminPort);

/** Options naming a secret file. */
const SECRET_FILE_OPTIONS = (Object.keys(SCHEMA) as (keyof Config)[]).filter((k) => k.endsWith('File') && k !== 'sandboxes' && `${k.slice(0, -4)}` in SCHEMA && (SCHEMA[k.slice(0, -4) as keyof typeof SCHEMA] as { secret?: boolean }).secret === true);

const EXAMPLE_SECRET = parse(readFileSync(join(DEPLOY, 'sandgate-secrets.example.yaml'), 'utf8')) as K8sObject;
const ENVOY_FILES = readdirSync(join(ROOT, 'envoy')).filter((f) => f.endsWith('.yaml')).sort();

describe.skipIf(UNAVAILABLE !== undefined)(UNAVAILABLE === undefined ? 'deploy/kubernetes' : `deploy/kubernetes (skipped: ${UNAVAILABLE})`, () => {
  it('has the edge, sidecar, dev and mtls overlays', () => {
    expect(OVERLAYS).toEqual(['dev', 'edge', 'mtls', 'sidecar']);
  });

  describe.each(BUILDS)('%s', (dir) => {
    it('builds with kubectl kustomize, without warnings', () => {
      expect(objectsOf(dir).length).toBeGreaterThan(0);
      expect(built.get(dir)!.stderr).toBe('');
    });

    it('holds only objects valid against the Kubernetes OpenAPI schemas (unknown fields fail)', () => {
      const problems = objectsOf(dir).flatMap((o) => kubeSchemaProblems(o).map((p) => `${o.metadata.name}: ${p}`));
      expect(problems).toEqual([]);
    });

    it('gives every Service endpoints: its selector picks pods that have each target port', () => {
      const objs = objectsOf(dir);
      const workloads = ofKind(objs, 'Deployment');
      for (const svc of ofKind(objs, 'Service')) {
        const picked = workloads.filter((w) => selects({ matchLabels: obj(svc.spec).selector }, podLabels(w)));
        expect(picked.map((w) => w.metadata.name), `Service ${svc.metadata.name}`).not.toEqual([]);
        for (const p of list(obj(svc.spec).ports).map(obj)) {
          for (const w of picked) {
            const found = containers(w).some((c) => portIn(c, p.targetPort ?? p.port) !== undefined);
            expect(found, `Service ${svc.metadata.name} port ${String(p.name)} → ${String(p.targetPort)} in ${w.metadata.name}`).toBe(true);
          }
        }
      }
    });

    it('points PodDisruptionBudgets and topology spread at their own pods', () => {
      const objs = objectsOf(dir);
      const workloads = ofKind(objs, 'Deployment');
      for (const pdb of ofKind(objs, 'PodDisruptionBudget')) {
        expect(workloads.filter((w) => selects(obj(pdb.spec).selector, podLabels(w))).length, `PDB ${pdb.metadata.name}`).toBe(1);
      }
      for (const w of workloads) {
        expect(selects(obj(w.spec).selector, podLabels(w)), `${w.metadata.name} selects its pods`).toBe(true);
        const spread = list(podSpec(w).topologySpreadConstraints).map(obj);
        expect(spread.map((s) => s.topologyKey), `${w.metadata.name} spreads across nodes`).toContain('kubernetes.io/hostname');
        for (const s of spread) expect(selects(s.labelSelector, podLabels(w)), `${w.metadata.name} spread selector`).toBe(true);
      }
    });

    it('runs every container as non-root with a read-only root filesystem and no capabilities', () => {
      for (const w of ofKind(objectsOf(dir), 'Deployment')) {
        const pod = obj(podSpec(w).securityContext);
        for (const c of containers(w)) {
          const sc = obj(c.securityContext);
          const what = `${w.metadata.name}/${String(c.name)}`;
          expect(sc.runAsNonRoot ?? pod.runAsNonRoot, what).toBe(true);
          expect(sc.runAsUser ?? pod.runAsUser, what).not.toBe(0);
          expect(sc.readOnlyRootFilesystem, what).toBe(true);
          expect(sc.allowPrivilegeEscalation, what).toBe(false);
          expect(list(obj(sc.capabilities).drop), what).toEqual(['ALL']);
          expect(obj(c.resources).requests, `${what} requests`).toBeDefined();
          expect(obj(c.resources).limits, `${what} limits`).toBeDefined();
        }
      }
    });
  });

  describe.each(['base', ...OVERLAYS.map((o) => `overlays/${o}`)])('sandgate in %s', (dir) => {
    const gw = (): Gateway => gatewayOf(objectsOf(dir));

    it('passes only flags, variables and file keys that exist in the configuration schema', () => {
      const flags = new Set(Object.keys(SCHEMA).flatMap((n) => [flagOf(n), `--no-${flagOf(n).slice(2)}`]));
      const { args, env } = gw();
      expect(args[0]).toBe('serve');
      for (const a of args.slice(1)) expect(flags.has(a.split('=')[0]!), a).toBe(true);
      for (const a of args) expect(a, 'every $(VAR) is defined').not.toMatch(/\$\(/);
      expect(Object.keys(env).filter((k) => k.startsWith('SANDGATE_')).length).toBeGreaterThan(0);
      // resolveConfig (in gatewayOf) rejects unknown flags, SANDGATE_ variables and config file keys.
      expect(gw().config.config, 'the configuration file is read').not.toBe('');
    });

    it('opens exactly the container ports, probing /healthz and /readyz on the operator listener', () => {
      const { config, container: c } = gw();
      expect(Object.fromEntries(containerPorts(c).map((p) => [p.name, p.port]))).toEqual(listeners(config));
      const probe = (p: unknown) => ({ path: obj(obj(p).httpGet).path, port: portIn(c, obj(obj(p).httpGet).port) });
      expect(config.opsPort, 'the operator surface apart from the decision door').toBeGreaterThan(0);
      expect(probe(c.livenessProbe)).toEqual({ path: '/healthz', port: opsListener(config) });
      expect(probe(c.readinessProbe)).toEqual({ path: '/readyz', port: opsListener(config) });
      expect(config.relayAdvertiseAddress).toBe(`${FIELD_SAMPLES['status.podIP']}:${config.relayPort}`);
    });

    it('lets only its own pods reach the decision doors and the relay, and admits every other port it opens', () => {
      const objs = objectsOf(dir);
      const g = gw();
      const pods = podLabels(g.deployment);
      const policies = ofKind(objs, 'NetworkPolicy').filter((p) => selects(obj(p.spec).podSelector, pods));
      expect(policies.map((p) => p.metadata.name)).toEqual(['sandgate-gateway']);
      const rules = list(obj(policies[0]!.spec).ingress).map(obj);
      const all = containers(g.deployment);
      const portOf = (p: unknown): number | undefined => all.map((c) => portIn(c, obj(p).port)).find((n) => n !== undefined);
      for (const r of rules) for (const p of list(r.ports)) expect(portOf(p), `policy port ${String(obj(p).port)} exists in the pod`).toBeDefined();
      const admitting = (port: number) => rules.filter((r) => list(r.ports).some((p) => portOf(p) === port));
      const own = ofKind(objs, 'Deployment').filter((w) => selects({ matchLabels: { 'app.kubernetes.io/part-of': 'sandgate' } }, podLabels(w)));
      for (const c of all) {
        for (const { name, port } of containerPorts(c)) {
          const by = admitting(port);
          expect(by.length, `${name} (${port}) is admitted`).toBe(1);
          if (![g.config.grpcPort, g.config.adminPort, g.config.relayPort].includes(port)) continue;
          const peers = list(by[0]!.from).map(obj);
          expect(peers.length, `${name} is not open to everyone`).toBeGreaterThan(0);
          for (const peer of peers) expect(Object.keys(peer), `${name}: pods of this namespace only`).toEqual(['podSelector']);
          for (const w of own) expect(peers.some((peer) => selects(peer.podSelector, podLabels(w))), `${w.metadata.name} reaches ${name}`).toBe(true);
        }
      }
    });

    it('runs one worker per requested CPU', () => {
      const { config, container: c } = gw();
      expect(config.workers).toBe(Math.max(1, Math.ceil(cores(obj(obj(c.resources).requests).cpu))));
    });

    it('gives the graceful shutdown its time: grace period ≥ preStop + --shutdown-timeout-ms', () => {
      const { config, container: c, deployment } = gw();
      const sleep = list(obj(obj(obj(c.lifecycle).preStop).exec).command).map(String);
      expect(sleep[0]).toBe('sleep');
      const grace = Number(podSpec(deployment).terminationGracePeriodSeconds);
      expect(grace).toBeGreaterThanOrEqual(Number(sleep[1]) + Math.ceil(config.shutdownTimeoutMs / 1000) + 1);
      expect(config.handoverTimeoutMs).toBeLessThanOrEqual(config.shutdownTimeoutMs / 2);
    });

    it('reads its secrets from files of the Secret, whose keys the example Secret has', () => {
      const g = gw();
      const example = Object.keys(obj(EXAMPLE_SECRET.stringData)).sort();
      // TLS Secrets a cert-manager Certificate of the same build writes are the other Secrets mounted.
      const issued = new Set(ofKind(objectsOf(dir), 'Certificate').map((c) => str(obj(c.spec).secretName)));
      for (const v of list(podSpec(g.deployment).volumes).map(obj)) {
        if (v.secret === undefined || issued.has(str(obj(v.secret).secretName))) continue;
        expect(obj(v.secret).secretName).toBe(EXAMPLE_SECRET.metadata.name);
        expect(list(obj(v.secret).items).map((i) => str(obj(i).key)).sort()).toEqual(example);
      }
      for (const option of SECRET_FILE_OPTIONS) {
        const path = g.config[option] as string;
        if (path === '') continue;
        const m = g.mounted(path);
        expect(m, `${option} ${path} is a mounted Secret file`).toMatchObject({ kind: 'secret', name: EXAMPLE_SECRET.metadata.name });
        expect(example, option).toContain(m!.key);
      }
      for (const option of Object.keys(SCHEMA) as (keyof Config)[]) {
        if ((SCHEMA[option] as { secret?: boolean }).secret === true) expect(g.config[option], `${option} is never inlined`).toBe('');
      }
    });

    it('runs the released image, under a ServiceAccount the ClusterRoleBinding names', () => {
      const objs = objectsOf(dir);
      const g = gw();
      expect(g.container.image).toBe(`sandgate:${PACKAGE_VERSION}`);
      const binding = named(objs, 'ClusterRoleBinding', 'sandgate');
      const sa = str(podSpec(g.deployment).serviceAccountName);
      expect(named(objs, 'ServiceAccount', sa)).toBeDefined();
      expect(list(binding?.subjects)).toEqual([{ kind: 'ServiceAccount', name: sa, namespace: g.deployment.metadata.namespace ?? 'default' }]);
      const role = named(objs, 'ClusterRole', str(obj(binding?.roleRef).name));
      expect(list(role?.rules).flatMap((r) => list(obj(r).apiGroups)).sort()).toEqual(Object.values(KUBE_KINDS).map((k) => k.group).sort());
    });
  });

  describe.each(['edge', 'sidecar'])('overlays/%s', (overlay) => {
    const objs = (): K8sObject[] => objectsOf(`overlays/${overlay}`);
    const envoyMap = (): K8sObject => {
      const maps = ofKind(objs(), 'ConfigMap').filter((m) => m.metadata.name.startsWith('sandgate-envoy-'));
      expect(maps.length).toBe(1);
      return maps[0]!;
    };
    const envoyWorkload = (): K8sObject => named(objs(), 'Deployment', overlay === 'edge' ? 'sandgate-envoy' : 'sandgate')!;

    it('carries envoy/*.yaml byte for byte in its Envoy ConfigMap, each passing the envoy/ checks', () => {
      const data = obj(envoyMap().data);
      expect(Object.keys(data).sort()).toEqual(ENVOY_FILES);
      for (const f of ENVOY_FILES) {
        expect(data[f], f).toBe(readFileSync(join(ROOT, 'envoy', f), 'utf8'));
        const doc = parse(str(data[f])) as unknown;
        expect(envoyProtoProblems(doc), f).toEqual([]);
        expect(contractProblems(f, doc), f).toEqual([]);
      }
    });

    it(`starts Envoy with a ${overlay}-*.yaml from that ConfigMap, on the port its Service targets`, () => {
      const w = envoyWorkload();
      const envoy = container(w, 'envoy');
      const args = list(envoy.args).map(String);
      const path = args[args.indexOf('-c') + 1] ?? '';
      const mount = list(envoy.volumeMounts).map(obj).find((m) => dirname(path) === str(m.mountPath).replace(/\/$/, ''));
      const volume = list(podSpec(w).volumes).map(obj).find((v) => v.name === mount?.name);
      expect(str(obj(volume?.configMap).name)).toBe(envoyMap().metadata.name);
      const file = basename(path);
      expect(file.startsWith(`${overlay}-`), file).toBe(true);
      const doc = parse(str(obj(envoyMap().data)[file])) as Obj;
      const listen = list(obj(doc.static_resources).listeners).map((l) => Number(obj(obj(obj(l).address).socket_address).port_value));
      expect(containerPorts(envoy).map((p) => p.port)).toEqual(listen);
      const svc = named(objs(), 'Service', 'sandgate-envoy');
      expect(list(obj(svc?.spec).ports).map((p) => portIn(envoy, obj(p).targetPort))).toEqual(listen);
      expect(selects({ matchLabels: obj(svc?.spec).selector }, podLabels(w))).toBe(true);

      // Envoy reaches sandgate where sandgate listens.
      const g = gatewayOf(objs());
      const clusters = list(obj(doc.static_resources).clusters).map(obj);
      const sandgate = clusters.find((c) => c.name !== 'sandbox_upstream')!;
      const [address] = socketAddresses(sandgate);
      if (overlay === 'edge') {
        const headless = named(objs(), 'Service', str(address?.address));
        expect(obj(headless?.spec).clusterIP, 'a headless Service, so STRICT_DNS sees every replica').toBe('None');
        const port = list(obj(headless?.spec).ports).map(obj).find((p) => p.port === address?.port_value);
        expect(portIn(g.container, port?.targetPort)).toBe(g.config.grpcPort);
      } else {
        expect(address).toEqual({ address: '127.0.0.1', port_value: g.config.grpcPort });
      }
    });

    it('turns the embedded proxy off: Envoy carries the traffic', () => {
      expect(gatewayOf(objs()).config.proxy).toBe(false);
      expect(named(objs(), 'Service', 'sandgate-proxy')).toBeUndefined();
    });

    it('is what the sandbox NetworkPolicies admit, and lets supervisors reach it', () => {
      const policies = ofKind(objectsOf('sandbox-isolation'), 'NetworkPolicy');
      expect(policies.length).toBe(2);
      const specs = policies.map((p) => ({ ...obj(p.spec), podSelector: undefined }));
      expect(specs[1]).toEqual(specs[0]);
      const spec = obj(policies[0]!.spec);
      const namespace = envoyWorkload().metadata.namespace;
      const ingress = list(spec.ingress).flatMap((r) => list(obj(r).from)).map(obj);
      expect(ingress.length).toBe(1);
      expect(obj(ingress[0]!.namespaceSelector).matchLabels).toEqual({ 'kubernetes.io/metadata.name': namespace });
      // Every pod that sends traffic to sandboxes: Envoy, and sandgate (relay and resume paths, the embedded proxy).
      for (const w of ofKind(objs(), 'Deployment')) expect(selects(ingress[0]!.podSelector, podLabels(w)), w.metadata.name).toBe(true);
      const g = gatewayOf(objs());
      const toGateway = list(spec.egress).map(obj).filter((r) => list(r.to).some((p) => obj(p).podSelector !== undefined && selects(obj(p).podSelector, podLabels(g.deployment))));
      expect(toGateway.length).toBe(1);
      expect(list(toGateway[0]!.ports)).toEqual([{ protocol: 'TCP', port: g.config.supervisorPort }]);
      expect(obj(obj(list(toGateway[0]!.to)[0]).namespaceSelector).matchLabels).toEqual({ 'kubernetes.io/metadata.name': namespace });
    });

    it('is scraped by the ServiceMonitor on its operator listener', () => {
      const [monitor] = ofKind(objectsOf('monitoring'), 'ServiceMonitor');
      expect(monitor?.metadata.namespace).toBe(envoyWorkload().metadata.namespace);
      const picked = ofKind(objs(), 'Service').filter((s) => selects(obj(monitor?.spec).selector, s.metadata.labels));
      expect(picked.map((s) => s.metadata.name)).toEqual(['sandgate-ops']);
      const endpoint = obj(list(obj(monitor?.spec).endpoints)[0]);
      const port = list(obj(picked[0]!.spec).ports).map(obj).find((p) => p.name === endpoint.port);
      const g = gatewayOf(objs());
      expect(portIn(g.container, port?.targetPort)).toBe(opsListener(g.config));
      expect(endpoint.path).toBe('/metrics');
    });
  });

  describe('overlays/mtls', () => {
    const objs = (): K8sObject[] => objectsOf('overlays/mtls');
    /** The cert-manager Certificate writing Secret `secretName`. */
    const certificateFor = (secretName: string): Obj => obj(ofKind(objs(), 'Certificate').find((c) => obj(c.spec).secretName === secretName)?.spec);

    it("serves sandgate's doors with the files of the Secret a server Certificate writes, admitting that CA's clients", () => {
      const g = gatewayOf(objs());
      const files = { cert: g.config.doorsTlsCertFile, key: g.config.doorsTlsKeyFile, ca: g.config.doorsClientCaFile };
      const mounted = Object.fromEntries(Object.entries(files).map(([k, path]) => [k, g.mounted(path)]));
      expect(mounted).toMatchObject({ cert: { kind: 'secret', key: 'tls.crt' }, key: { kind: 'secret', key: 'tls.key' }, ca: { kind: 'secret', key: 'ca.crt' } });
      expect(new Set(Object.values(mounted).map((m) => m!.name)).size).toBe(1);
      expect(list(certificateFor(mounted.cert!.name).usages)).toContain('server auth');
    });

    it('runs Envoy on envoy/edge-ext-authz-mtls.yaml with a client Certificate of the same CA, checking the name the doors certificate holds', () => {
      const w = named(objs(), 'Deployment', 'sandgate-envoy')!;
      const envoy = container(w, 'envoy');
      const args = list(envoy.args).map(String);
      expect(args[args.indexOf('-c') + 1]).toBe('/etc/envoy/edge-ext-authz-mtls.yaml');
      const doc = parse(readFileSync(join(ROOT, 'envoy', 'edge-ext-authz-mtls.yaml'), 'utf8')) as Obj;
      const cluster = list(obj(doc.static_resources).clusters).map(obj).find((c) => c.name === 'sandgate_grpc')!;
      const tls = obj(obj(obj(cluster.transport_socket).typed_config).common_tls_context);
      const paths = [str(obj(obj(list(tls.tls_certificates)[0]).certificate_chain).filename), str(obj(obj(list(tls.tls_certificates)[0]).private_key).filename), str(obj(obj(tls.validation_context).trusted_ca).filename)];
      const volumes = list(podSpec(w).volumes).map(obj);
      const secrets = paths.map((p) => {
        const m = list(envoy.volumeMounts).map(obj).find((x) => dirname(p) === str(x.mountPath));
        return { secret: str(obj(volumes.find((v) => v.name === m?.name)?.secret).secretName), key: basename(p) };
      });
      expect(secrets.map((s) => s.key)).toEqual(['tls.crt', 'tls.key', 'ca.crt']);
      const client = certificateFor(secrets[0]!.secret);
      expect(list(client.usages)).toContain('client auth');
      const g = gatewayOf(objs());
      const server = certificateFor(g.mounted(g.config.doorsTlsCertFile)!.name);
      expect(obj(client.issuerRef)).toEqual(obj(server.issuerRef));
      const sni = str(obj(obj(cluster.transport_socket).typed_config).sni);
      expect(list(server.dnsNames)).toContain(sni);
      expect(list(obj(tls.validation_context).match_typed_subject_alt_names).map((m) => obj(obj(m).matcher).exact)).toEqual([sni]);
    });

    it("reaches the relay listeners over mutual TLS: the doors Certificate is a client one too (peers present it), Envoy's relay cluster presents its own", () => {
      const g = gatewayOf(objs());
      expect(list(certificateFor(g.mounted(g.config.doorsTlsCertFile)!.name).usages)).toEqual(expect.arrayContaining(['server auth', 'client auth']));
      const doc = parse(readFileSync(join(ROOT, 'envoy', 'edge-ext-authz-mtls.yaml'), 'utf8')) as Obj;
      const clusters = list(obj(doc.static_resources).clusters).map(obj);
      const tlsOf = (name: string): unknown => obj(obj(clusters.find((c) => c.name === name)!.transport_socket).typed_config);
      const doors = obj(tlsOf('sandgate_grpc'));
      const relay = obj(tlsOf('relay_upstream'));
      const ctx = (t: Obj): Obj => obj(t.common_tls_context);
      expect([ctx(relay).tls_certificates, ctx(relay).validation_context, relay.sni]).toEqual([ctx(doors).tls_certificates, ctx(doors).validation_context, doors.sni]);
      const routes = list(obj(list(obj(connectionManagers(doc)[0]?.route_config).virtual_hosts)[0]).routes).map(obj);
      expect(routes.map((r) => obj(r.route).cluster)).toEqual(['relay_upstream_h2c', 'relay_upstream', 'sandbox_upstream_h2c', 'sandbox_upstream']);
      expect(list(obj(routes[0]!.match).headers).map(obj)).toEqual([
        { name: 'x-sandgate-relay-target', present_match: true },
        { name: 'x-sandgate-upstream-protocol', string_match: { exact: 'h2c' } },
      ]);
      expect(obj(list(obj(routes[1]!.match).headers)[0])).toEqual({ name: 'x-sandgate-relay-target', present_match: true });
      const relayH2c = obj(tlsOf('relay_upstream_h2c'));
      expect([ctx(relayH2c).tls_certificates, ctx(relayH2c).validation_context, relayH2c.sni, ctx(relayH2c).alpn_protocols]).toEqual([ctx(doors).tls_certificates, ctx(doors).validation_context, doors.sni, ['h2']]);
    });

    it('probes the ops port over HTTPS (it asks for no client certificate)', () => {
      const c = gatewayOf(objs()).container;
      expect([obj(obj(c.livenessProbe).httpGet).scheme, obj(obj(c.readinessProbe).httpGet).scheme]).toEqual(['HTTPS', 'HTTPS']);
    });
  });

  it('selects agent-sandbox and OpenKruise pods by the labels their controllers set', () => {
    const policies = ofKind(objectsOf('sandbox-isolation'), 'NetworkPolicy');
    const pick = (labels: Record<string, string>) => policies.filter((p) => selects(obj(p.spec).podSelector, labels)).map((p) => p.metadata.name);
    expect(pick({ 'agents.x-k8s.io/sandbox-name-hash': 'a1b2c3' })).toEqual(['sandgate-agent-sandbox-isolation']);
    expect(pick({ 'agents.kruise.io/created-by': 'sandbox' })).toEqual(['sandgate-openkruise-isolation']);
    expect(pick({ 'app.kubernetes.io/name': 'sandgate' })).toEqual([]);
  });

  it('dev: one replica, memory presence, the demo sandboxes, no Redis', () => {
    const g = gatewayOf(objectsOf('overlays/dev'));
    expect(obj(g.deployment.spec).replicas).toBe(1);
    expect(g.config.presence).toBe('memory');
    expect(g.config.demo).toBe('on');
    expect(g.config.apiKeys).toBe('');
    expect(g.config.kubernetes).toBe(false);
  });

  it('production overlays share presence through Redis and watch the Sandbox resources', () => {
    for (const overlay of ['edge', 'sidecar']) {
      const g = gatewayOf(objectsOf(`overlays/${overlay}`));
      expect(g.config.presence, overlay).toMatch(/^rediss?:\/\//);
      expect(g.config.kubernetes, overlay).toBe(true);
      expect(Number(obj(g.deployment.spec).replicas), overlay).toBeGreaterThan(1);
    }
  });
});

describe('the strict schema check', () => {
  const deployment = (): K8sObject => structuredClone(parse(readFileSync(join(DEPLOY, 'base', 'deployment.yaml'), 'utf8')) as K8sObject);

  it('accepts the base Deployment as written', () => {
    expect(kubeSchemaProblems(deployment())).toEqual([]);
  });

  it.each<[string, (d: K8sObject) => void, RegExp]>([
    ['a misspelt container field', (d) => void (containers(d)[0]!.imagePullPolcy = 'Always'), /containers\/0\/imagePullPolcy: unknown field/],
    ['a misspelt port field', (d) => void (obj(list(containers(d)[0]!.ports)[0]).containerport = 1), /ports\/0\/containerport: unknown field/],
    ['an unknown top-level field', (d) => void (d.extra = true), /\/extra: unknown field/],
    ['a wrong type', (d) => void ((d.spec as Obj).replicas = 'three'), /integer/],
    ['a missing required field', (d) => void delete containers(d)[0]!.name, /name/],
    ['a probe with a bad port type', (d) => void (obj(obj(containers(d)[0]!.livenessProbe).httpGet).port = { name: 'admin' }), /livenessProbe/],
  ])('rejects %s', (_what, edit, problem) => {
    const d = deployment();
    edit(d);
    expect(kubeSchemaProblems(d).join('\n')).toMatch(problem);
  });

  it('accepts the keys of maps (labels, resources) and refuses a kind it has no schema for', () => {
    const d = deployment();
    (d.metadata.labels as Record<string, string>)['example.com/anything'] = 'x';
    expect(kubeSchemaProblems(d)).toEqual([]);
    expect(kubeSchemaProblems({ apiVersion: 'agents.x-k8s.io/v1alpha1', kind: 'Sandbox', metadata: { name: 'x' } }).join()).toMatch(/no schema/);
  });
});

describe('docs/kubernetes.md', () => {
  const guide = readFileSync(join(ROOT, 'docs', 'kubernetes.md'), 'utf8');

  it('installs in five commands, creating the Secret with every key the manifests mount', () => {
    const install = /## Install in five commands\n\n```sh\n([\s\S]*?)```/.exec(guide)?.[1] ?? '';
    expect(install.split('\n').filter((l) => l.startsWith('kubectl ')).length).toBe(5);
    for (const key of Object.keys(obj(EXAMPLE_SECRET.stringData))) expect(install).toContain(`--from-literal=${key}=`);
  });

  it('explains every overlay and every directory of deploy/kubernetes', () => {
    for (const o of OVERLAYS) expect(guide).toContain(`overlays/${o}`);
    for (const d of readdirSync(DEPLOY)) expect(guide, d).toContain(d);
  });
});
