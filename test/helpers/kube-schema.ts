import * as certManagerV1 from '@kubernetes-models/cert-manager/cert-manager.io/v1';
import * as monitoringV1 from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1';
import * as appsV1 from 'kubernetes-models/apps/v1';
import * as autoscalingV2 from 'kubernetes-models/autoscaling/v2';
import * as networkingV1 from 'kubernetes-models/networking.k8s.io/v1';
import * as policyV1 from 'kubernetes-models/policy/v1';
import * as rbacV1 from 'kubernetes-models/rbac.authorization.k8s.io/v1';
import * as coreV1 from 'kubernetes-models/v1';

/**
 * Strict validation of Kubernetes objects against the OpenAPI schemas that the `kubernetes-models` packages
 * ship as compiled validators. Those validators check types, required fields, enums and formats, but let
 * unknown fields through (the schemas carry no `additionalProperties: false`), where `kubectl apply
 * --validate=strict` would refuse them. The missing strictness is taken from the same validators: the
 * object is handed to them behind a proxy that records which fields the schema asked for. A compiled
 * validator reads every property its schema declares (present or not) and enumerates the keys only of
 * maps (`additionalProperties`), so a key of a checked object that it neither read nor enumerated is a
 * field the schema does not have.
 */

type ModelClass = { prototype: { validate(this: unknown): void } };

const GROUPS: Readonly<Record<string, Readonly<Record<string, unknown>>>> = {
  v1: coreV1,
  'apps/v1': appsV1,
  'autoscaling/v2': autoscalingV2,
  'networking.k8s.io/v1': networkingV1,
  'policy/v1': policyV1,
  'rbac.authorization.k8s.io/v1': rbacV1,
  'monitoring.coreos.com/v1': monitoringV1,
  'cert-manager.io/v1': certManagerV1,
};

interface Visit {
  readonly path: string;
  readonly keys: readonly string[];
  readonly read: Set<string>;
  enumerated: boolean;
}

function tracked(value: unknown, path: string, visits: Visit[]): unknown {
  if (typeof value !== 'object' || value === null) return value;
  const visit: Visit = { path, keys: Array.isArray(value) ? [] : Object.keys(value), read: new Set(), enumerated: false };
  visits.push(visit);
  const children = new Map<string, unknown>();
  return new Proxy(value, {
    get(target, key, receiver) {
      if (typeof key !== 'string') return Reflect.get(target, key, receiver) as unknown;
      visit.read.add(key);
      if (!Object.hasOwn(target, key)) return Reflect.get(target, key, receiver) as unknown;
      if (!children.has(key)) children.set(key, tracked((target as Record<string, unknown>)[key], `${path}/${key}`, visits));
      return children.get(key);
    },
    ownKeys(target) {
      visit.enumerated = true;
      return Reflect.ownKeys(target);
    },
  });
}

/** Problems of one object (`kind`, `apiVersion` and the schema of that pair); empty when it is valid. */
export function kubeSchemaProblems(object: Record<string, unknown>): string[] {
  const apiVersion = String(object.apiVersion);
  const kind = String(object.kind);
  const model = GROUPS[apiVersion]?.[kind] as ModelClass | undefined;
  if (model === undefined) return [`${apiVersion} ${kind}: no schema for this kind (add its group to test/helpers/kube-schema.ts)`];
  const visits: Visit[] = [];
  const problems: string[] = [];
  try {
    model.prototype.validate.call(tracked(structuredClone(object), '', visits));
  } catch (err) {
    problems.push(`${kind}: ${(err as Error).message}`);
  }
  for (const v of visits) {
    if (v.enumerated || v.keys.length === 0) continue;
    if (v.read.size === 0) {
      problems.push(`${kind} ${v.path || '/'}: no schema checked this object (free-form fields are not allowed here)`);
      continue;
    }
    for (const k of v.keys) if (!v.read.has(k)) problems.push(`${kind} ${v.path}/${k}: unknown field`);
  }
  return problems;
}
