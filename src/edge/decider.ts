import { performance } from 'node:perf_hooks';
import { accessFor, ANONYMOUS, linkUnderPolicy, NO_ENVD_CHECK, NO_KEYS_REQUIRED, type KeyPolicy } from '../domain/access.js';
import { DEFAULT_POLICIES, type NamespacePolicies } from '../domain/access-policy.js';
import { workloadAccess } from '../domain/workload-access.js';
import type { WorkloadJwtAuth } from '../auth/workload-jwt.js';
import { answerFor, decide, deny, isUpgrade, routeOf, type Access, type Decision, type Deny } from '../domain/decide.js';
import type { RouteOptions, RouteRequest } from '../domain/route-key.js';
import { sandboxKey } from '../domain/sandbox.js';
import { SandgateError } from '../domain/errors.js';
import { CLIENT_CLOSED, type Exchange, type ExchangeRecorder } from '../observability/exchange.js';
import type { Logger } from '../observability/logger.js';
import type { Door, GatewayMetrics, WaitOutcomeLabel } from '../observability/metrics.js';
import type { SandboxView } from '../view/sandbox-view.js';
import type { ApiKeyAuth } from '../auth/api-keys.js';
import type { LinkAuth } from '../auth/link-tokens.js';
import { linkAccess, linkCookiePath } from '../domain/link.js';
import { renderDenial, wantsHtml } from './denial.js';
import type { Resumer } from '../lifecycle/resumer.js';
import type { ActivityRecorder } from '../lifecycle/activity-recorder.js';

/** Tenancy and traffic auth settings the decision applies (domain/access.ts). */
export interface RequestAuth {
  /** Undefined when no API key store is configured: every request is anonymous. */
  readonly keys: ApiKeyAuth | undefined;
  readonly apiKeyHeader: string;
  readonly policy: KeyPolicy;
  /** Headers that may carry a sandbox's traffic token, in order. */
  readonly tokenHeaders: readonly string[];
  /**
   * The header carrying the in-sandbox daemon's token (E2B `x-access-token`). Empty turns envd semantics
   * off: no edge check, and the envd port needs the traffic token like any other.
   */
  readonly envdTokenHeader: string;
  /** The port the in-sandbox daemon listens on (E2B envd: 49983). */
  readonly envdPort: number;
  /** Signed links and their cookies (`--link-keys-file`); undefined when links are off. */
  readonly links?: LinkAuth | undefined;
  /** Namespace default access policies (`--access-policy-file`); absent, `keys` everywhere. */
  readonly policies?: NamespacePolicies | undefined;
  /** Workload JWTs (`--jwt-issuers-file`); undefined when no issuer is configured. */
  readonly jwt?: WorkloadJwtAuth | undefined;
}

// A list of readonly fields, shaped like domain/decide.ts Deny by chance: nothing to share.
export interface DeciderOptions {
  readonly view: SandboxView;
  readonly route: RouteOptions;
  /** `--readiness-wait-ms`: how long a request in a readiness gap waits; 0 answers at once. */
  readonly readinessWaitMs: number;
  readonly metrics: GatewayMetrics;
  readonly log: Logger;
  /** Tenancy and traffic tokens; absent, every request is anonymous and no token is checked. */
  readonly auth?: RequestAuth | undefined;
  /** Auto-resume on traffic; absent, a paused sandbox is answered `sandbox_paused`. */
  readonly resumer?: Resumer | undefined;
  /** Exchange records for the access log and tracing; absent when both are off. */
  readonly recorder?: ExchangeRecorder | undefined;
  /** Records an allowed request as the sandbox port's activity (lifecycle/activity-log.ts); absent, nothing is recorded. */
  readonly activity?: ActivityRecorder | undefined;
}

/**
 * The front doors' shared use of decide(): it times and counts every decision and, for a sandbox in a
 * short readiness gap, waits for the view to change (not polling) up to the readiness wait, deciding again
 * on each change of that sandbox.
 */
export class Decider {
  readonly view: SandboxView;
  readonly route: RouteOptions;
  readonly readinessWaitMs: number;
  /** The doors begin an exchange record per request when this is set (exchange.ts), and only then. */
  readonly recorder: ExchangeRecorder | undefined;
  private readonly metrics: GatewayMetrics;
  private readonly log: Logger;
  private readonly auth: RequestAuth | undefined;
  private readonly resumer: Resumer | undefined;
  private readonly activity: ActivityRecorder | undefined;
  /** The log level is fixed at start: read once, not per decision. */
  private readonly debug: boolean;
  /** Signed links (undefined when off): doors then also take sandgate's cookie out of what they forward. */
  readonly links: LinkAuth | undefined;
  private readonly cookiePath: ReturnType<typeof linkCookiePath>;
  private readonly policies: NamespacePolicies;
  /** Workload JWTs (undefined when off): doors then also keep `Authorization` from the sandbox. */
  readonly jwt: WorkloadJwtAuth | undefined;

  // Copied into fields, not kept as one object: every request reads them, and own fields keep that a
  // single property load.
  constructor(o: DeciderOptions) {
    this.view = o.view;
    this.route = o.route;
    this.readinessWaitMs = o.readinessWaitMs;
    this.metrics = o.metrics;
    this.log = o.log;
    this.auth = o.auth;
    this.resumer = o.resumer;
    this.recorder = o.recorder;
    this.activity = o.activity;
    this.debug = o.log.isLevelEnabled('debug');
    this.links = o.auth?.links;
    this.cookiePath = linkCookiePath(o.route.pathPrefix);
    this.policies = o.auth?.policies ?? DEFAULT_POLICIES;
    this.jwt = o.auth?.jwt;
  }

  /** The access check for one request (undefined when nothing can require one). */
  access(req: RouteRequest): Access | undefined {
    const a = this.auth;
    if (a === undefined) return undefined;
    if (req.tunnel === true) return this.tunnelAccess(a, req);
    // A link stands for the key and the traffic token: a query token decides alone, session cookies for
    // the sandbox port asked for do, and the check below applies when none is (domain/link.ts).
    const link = this.links?.presented(req);
    if (link !== undefined) {
      // A WebSocket: an HTTP/1.1 upgrade, or HTTP/2's extended CONNECT (RFC 8441), read as the GET it stands for.
      const upgrade = isUpgrade(req);
      const method = upgrade && req.method === 'CONNECT' ? 'GET' : req.method;
      const fallback = link.via === 'cookie' ? this.credentialAccess(a, req) : undefined;
      return linkUnderPolicy(linkAccess(link, { method: method ?? 'GET', path: req.path ?? '/', upgrade, secure: req.secure === true, origin: req.headers.origin, host: req.host }, this.links!.now(), this.links!.isRevoked, this.cookiePath, fallback), fallback, this.policies);
    }
    return this.credentialAccess(a, req);
  }

  /** The check of the API key and traffic token a request carries (undefined when nothing can require one). */
  private credentialAccess(a: RequestAuth, req: RouteRequest): Access | undefined {
    let token: string | undefined;
    for (const h of a.tokenHeaders) {
      token = req.headers[h];
      if (token !== undefined) break;
    }
    const envdToken = a.envdTokenHeader === '' ? undefined : req.headers[a.envdTokenHeader];
    const apiKey = a.keys === undefined ? undefined : req.headers[a.apiKeyHeader];
    // A workload JWT counts when no API key is presented (an API key is the caller's explicit choice).
    const jwt = apiKey === undefined ? this.jwt?.presented(req) : undefined;
    if (a.keys === undefined && token === undefined && jwt === undefined && this.view.tokenSandboxes === 0 && this.policies === DEFAULT_POLICIES) return undefined;
    const principal = a.keys === undefined ? ANONYMOUS : a.keys.principal(apiKey);
    const envd = { token: envdToken, port: a.envdTokenHeader === '' ? 0 : a.envdPort };
    const keyPolicy = a.keys === undefined ? NO_KEYS_REQUIRED : a.policy;
    if (jwt !== undefined) return workloadAccess(jwt, accessFor(ANONYMOUS, keyPolicy, token, envd, this.policies), this.policies);
    return accessFor(principal, keyPolicy, token, envd, this.policies);
  }

  /**
   * A tunnel's access check: never a link (its cookie rides along with any request the browser sends, so
   * it never opens a raw byte stream). `Proxy-Authorization: Bearer` (what a proxy client sends with
   * CONNECT) carries the API key — or the sandbox's traffic token, when the key comes in its own header
   * or no key store is configured.
   */
  private tunnelAccess(a: RequestAuth, req: RouteRequest): Access | undefined {
    const bearer = proxyBearer(req.headers['proxy-authorization']);
    let key = req.headers[a.apiKeyHeader];
    let token: string | undefined;
    for (const h of a.tokenHeaders) {
      token = req.headers[h];
      if (token !== undefined) break;
    }
    if (bearer !== undefined) {
      if (key === undefined && a.keys !== undefined) key = bearer;
      else token ??= bearer;
    }
    if (a.keys === undefined && token === undefined && this.view.tokenSandboxes === 0 && this.policies === DEFAULT_POLICIES) return undefined;
    const principal = a.keys === undefined ? ANONYMOUS : a.keys.principal(key);
    return accessFor(principal, a.keys === undefined ? NO_KEYS_REQUIRED : a.policy, token, NO_ENVD_CHECK, this.policies);
  }

  /** Decides at once. When `shouldWait(d)`, the door calls wait() and answers with its result instead. */
  decide(door: Door, req: RouteRequest): Decision {
    const t0 = performance.now();
    const d = decide(this.view, this.route, req, this.access(req));
    const seconds = (performance.now() - t0) / 1000;
    if (this.shouldWait(d)) this.metrics.observeLatency(door, seconds);
    else this.recordDecision(door, d, req, seconds);
    return d;
  }

  /**
   * The one decide → wait → answer sequence of every door: decides at once; in a readiness gap waits
   * (aborted by `abortOn()`'s signal when the client goes away, and then nothing is answered); and answers
   * every outcome as a decision — an error while deciding or waiting is logged and answered as the
   * `internal_error` denial, the same way as any other denial. Returns the wait, when there is one.
   * `ctx` (the door's response or call) is handed to both callbacks, so a door passes functions it made
   * once instead of closures made per request.
   */
  decideAndAnswer<C>(door: Door, req: RouteRequest, ctx: C, abortOn: (ctx: C) => AbortSignal, answer: (d: Decision, req: RouteRequest, ctx: C) => void, x?: Exchange): Promise<void> | undefined {
    // A link token or workload JWT not seen before is verified first (a signature check, and for a JWT
    // perhaps a bounded JWKS fetch: off the common path, once per token).
    const link = this.links?.pending(req);
    const jwt = this.jwt?.pending(req);
    const verifying = jwt === undefined ? link : link === undefined ? jwt : Promise.all([link, jwt]);
    if (verifying === undefined) return this.decideThenAnswer(door, req, ctx, abortOn, answer, x);
    return verifying
      .then(() => this.decideThenAnswer(door, req, ctx, abortOn, answer, x))
      .catch((err: unknown) => {
        this.log.error({ err, door }, 'credential verification failed');
        answer(deny('internal_error'), req, ctx);
      });
  }

  private decideThenAnswer<C>(door: Door, req: RouteRequest, ctx: C, abortOn: (ctx: C) => AbortSignal, answer: (d: Decision, req: RouteRequest, ctx: C) => void, x?: Exchange): Promise<void> | undefined {
    let d: Decision;
    try {
      if (x === undefined) d = this.decide(door, req);
      else {
        x.decisionStart = performance.now();
        d = this.decide(door, req);
        x.decisionEnd = performance.now();
      }
    } catch (err) {
      this.log.error({ err, door }, 'decision failed');
      d = deny('internal_error');
      if (x !== undefined) this.settle(x, d, req, false);
      answer(d, req, ctx);
      return undefined;
    }
    if (!this.shouldWait(d)) {
      if (x !== undefined) this.settle(x, d, req, false);
      answer(d, req, ctx);
      return undefined;
    }
    const signal = abortOn(ctx);
    x?.waitStarted();
    return this.wait(door, req, d, signal, x)
      .catch((err: unknown) => {
        this.log.error({ err, door }, 'readiness wait failed');
        return deny('internal_error');
      })
      .then((final) => {
        if (x !== undefined) {
          if (x.waitEnd === 0) x.waitEnded('error');
          this.settle(x, final, req, signal.aborted);
        }
        if (!signal.aborted) answer(final, req, ctx);
      })
      .catch((err: unknown) => this.log.error({ err, door }, 'answering a decision failed'));
  }

  /**
   * Fills the record in from the final decision. At the authorization doors the decision is the answer,
   * so the record is finished here: 200 for an allow, else the denial's status and body length; a client
   * gone during the wait got no answer at any door.
   */
  private settle(x: Exchange, d: Decision, req: RouteRequest, gone: boolean): void {
    x.tenant = this.tenantOf(req);
    x.allowed = d.allow;
    if (d.allow) {
      x.policy = d.policy ?? 'keys';
      x.namespace = d.entry.namespace;
      x.name = d.entry.name;
      x.port = d.target.port;
    } else {
      x.code = d.code;
      const t = routeOf(req, this.route);
      const target = typeof t === 'object' ? t : undefined;
      x.namespace = d.namespace ?? target?.namespace;
      x.name = d.name ?? target?.name;
      x.port = target?.port;
    }
    if (gone) x.finish(0, CLIENT_CLOSED);
    else if (x.door === 'proxy') return;
    else if (d.allow) x.finish(200);
    else {
      x.bytesOut = Buffer.byteLength(renderDenial(d, req.headers.accept, req.headers['sec-fetch-mode']).body);
      x.finish(d.status);
    }
  }

  /** The principal's name for the exchange record: a team (of an API key or a workload JWT), `admin`, `anonymous` or `invalid`. */
  private tenantOf(req: RouteRequest): string {
    const a = this.auth;
    const apiKey = a?.keys === undefined ? undefined : req.headers[a.apiKeyHeader];
    if (apiKey === undefined) {
      const jwt = this.jwt?.presented(req);
      if (jwt !== undefined) return jwt.ok ? jwt.workload.team : 'invalid';
    }
    if (a?.keys === undefined) return 'anonymous';
    const p = a.keys.principal(apiKey);
    return p.kind === 'team' ? p.team : p.kind;
  }

  shouldWait(d: Decision): d is Deny {
    if (d.allow || this.readinessWaitMs <= 0) return false;
    return d.waitable || (d.code === 'sandbox_paused' && this.resumable(d));
  }

  private resumable(d: Deny): boolean {
    if (this.resumer === undefined) return false;
    const entry = this.view.get(d.namespace!, d.name!);
    return entry !== undefined && this.resumer.allows(entry);
  }

  /**
   * Waits for the sandbox named by `first` to change, re-deciding each time, until allowed, final or timed
   * out. For a paused sandbox that may be resumed on traffic, starts (or joins) its resume first.
   */
  async wait(door: Door, req: RouteRequest, first: Deny, signal?: AbortSignal, x?: Exchange): Promise<Decision> {
    const key = sandboxKey(first.namespace!, first.name!);
    let budget = this.readinessWaitMs;
    let resuming: Promise<void> | undefined;
    let resumeError: unknown;
    if (first.code === 'sandbox_paused') {
      const entry = this.view.get(first.namespace!, first.name!);
      if (entry !== undefined && this.resumer !== undefined) {
        // A wake waits for the sandbox's own budget (sandgate.dev/wake-timeout) when it has one.
        budget = entry.snapshot.wakeTimeoutMs ?? budget;
        resuming = this.resumer.trigger(entry);
        resuming.catch((err: unknown) => (resumeError = err ?? new Error('resume failed')));
      }
    }
    const deadline = performance.now() + budget;
    const resumeFailed = (err: unknown): Deny => {
      const entry = this.view.get(first.namespace!, first.name!);
      // Refused before any resume (gone, namespace at its limit): that typed answer, not a failure.
      if (err instanceof SandgateError && (err.code === 'sandbox_gone' || err.code === 'namespace_quota_exceeded')) return deny(err.code, err.message, entry, err.code === 'namespace_quota_exceeded' ? RETRY_AFTER_QUOTA : undefined);
      return deny('sandbox_resume_failed', `The sandbox could not be resumed: ${err instanceof Error ? err.message : String(err)}`, entry, 1);
    };
    let d: Decision = first;
    let outcome: WaitOutcomeLabel = 'timeout';
    // A driver may report the resumed sandbox before its resume call even returns: look again first.
    let settledEarly = false;
    if (resuming !== undefined) {
      d = decide(this.view, this.route, req, this.access(req));
      settledEarly = d.allow || (!d.waitable && d.code !== 'sandbox_paused');
      if (settledEarly) outcome = d.allow ? 'ready' : 'final';
    }
    while (!settledEarly) {
      const left = deadline - performance.now();
      if (left <= 0) break;
      const r = await this.view.waiters.wait(key, left, signal);
      if (resumeError !== undefined) {
        d = resumeFailed(resumeError);
        outcome = d.code === 'sandbox_resume_failed' ? 'resume_failed' : 'final';
        break;
      }
      if (r === 'busy') {
        d = deny('gateway_busy', undefined, undefined, 1);
        outcome = r;
        break;
      }
      if (r !== 'changed') {
        outcome = r;
        if (r !== 'timeout') d = decide(this.view, this.route, req, this.access(req));
        break;
      }
      d = decide(this.view, this.route, req, this.access(req));
      // Still paused while our resume is under way: keep waiting.
      if (!d.allow && d.code === 'sandbox_paused' && resuming !== undefined) continue;
      if (d.allow || !d.waitable) {
        outcome = d.allow ? 'ready' : 'final';
        break;
      }
    }
    if (outcome === 'timeout' && !d.allow && d.code === 'sandbox_paused' && resuming !== undefined) {
      // Past the wake budget the wake goes on: the client is told to come back, not that it failed.
      d = deny('sandbox_not_ready', `The sandbox is waking up (not Ready within ${budget} ms); retry shortly`, this.view.get(first.namespace!, first.name!), RETRY_AFTER_WAKE);
    }
    this.metrics.wait(outcome);
    x?.waitEnded(outcome);
    // A browser navigation gets a page that reloads itself (denial.ts) instead of an error to read.
    if (!d.allow && d.code === 'sandbox_not_ready' && isNavigation(req)) d = { ...d, starting: true, retryAfter: d.retryAfter ?? RETRY_AFTER_WAKE };
    // Denials made here (busy, resume failed) read to an E2B client as the ones decide() makes.
    if (!d.allow) d = this.answer(req, d);
    this.recordDecision(door, d, req, undefined);
    return d;
  }

  /**
   * A denial made after decide() (waiting, or by a door reaching the sandbox: relay busy, …) as the
   * client must read it: E2B-addressed requests get the E2B SDK's statuses (domain/e2b-answers.ts).
   */
  answer(req: RouteRequest, d: Deny): Deny {
    if (this.route.e2bAnswers === false) return d;
    const t = routeOf(req, this.route);
    return typeof t === 'object' ? answerFor(t, d) : d;
  }

  /** Counts the decision (and its latency, when timed) and logs it: allows and expected denials at debug. */
  private recordDecision(door: Door, d: Decision, req: RouteRequest, seconds: number | undefined): void {
    this.metrics.decision(door, d.allow ? undefined : d.code, seconds);
    if (d.allow) {
      this.activity?.request(d, d.target.path ?? req.path);
      if (this.debug) {
        this.log.debug({ door, requestId: req.headers['x-request-id'], sandbox: d.entry.key, upstream: d.upstream }, 'allow');
      }
    } else if (d.status >= 500 && d.code !== 'sandbox_not_ready' && d.code !== 'gateway_not_ready') {
      this.log.error({ door, requestId: req.headers['x-request-id'], code: d.code, sandbox: d.namespace && sandboxKey(d.namespace, d.name ?? ''), reason: d.reason }, d.message);
    } else if (this.debug) {
      this.log.debug({ door, requestId: req.headers['x-request-id'], code: d.code, status: d.status, sandbox: d.namespace && sandboxKey(d.namespace, d.name ?? '') }, d.message);
    }
  }
}

/** Seconds a client is told to wait before retrying a wake past its budget (the starting page's refresh). */
const RETRY_AFTER_WAKE = 2;
/** Seconds before retrying a wake its namespace's limit refused. */
const RETRY_AFTER_QUOTA = 30;

/** A browser loading a page (Fetch metadata `Sec-Fetch-Mode: navigate`, or an Accept that asks for HTML). */
export function isNavigation(req: RouteRequest): boolean {
  return wantsHtml(req.headers.accept, req.headers['sec-fetch-mode']);
}

/** The credential of `Proxy-Authorization: Bearer <credential>` (RFC 9110 §11.7.1); undefined for any other scheme. */
function proxyBearer(v: string | undefined): string | undefined {
  if (v === undefined || v.length < 8 || v.slice(0, 7).toLowerCase() !== 'bearer ') return undefined;
  const c = v.slice(7).trim();
  return c === '' ? undefined : c;
}

/** A signal that fires when `source` (the client's response or socket) closes: the client went away. */
export function abortOnClose(source: { once(event: 'close', fn: () => void): unknown }): AbortSignal {
  const ac = new AbortController();
  source.once('close', () => ac.abort());
  return ac.signal;
}
