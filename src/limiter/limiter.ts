import { match } from '../config/match';
import type { CompiledConfig, MatchedLimit, RateLimitRule } from '../config/types';
import { counterKey, hasUpstreamKey, type KeyOptions, upstreamKey } from '../keys';
import { type Code, type LimitMode, MAX_UINT32, type RateLimitRequest } from '../model';
import type { Decision, DecideOptions, LimitCheck, Store } from '../store/store';

export interface LimiterSettings {
  keys: KeyOptions;
  countDeniedHits: boolean;
  globalShadowMode: boolean;
  globalQuotaMode: boolean;
}

export type DescriptorKind = 'no_limit' | 'unlimited' | 'limited';

export interface DescriptorResult {
  kind: DescriptorKind;
  code: Code;
  rule?: RateLimitRule;
  matched?: MatchedLimit;
  mode?: LimitMode;
  hits: number;
  // uint32 on the wire; MAX_UINT32 for unlimited descriptors, 0 when over the limit (known: the
  // limit said no). undefined = not known: the store answered without asking about this limit (a
  // cached denial of another limit of the request, the `allow` fallback). Never filled in.
  remaining: number | undefined;
  // ms until the counter is empty again; undefined = not known (or no limit applies).
  resetMs?: number;
  // Only on OVER_LIMIT: ms until the same hits would pass (Infinity: never).
  retryAfterMs?: number;
  // The limit said no on its own (reported OK when in shadow mode).
  wouldDeny: boolean;
  consumed: boolean;
  usedBefore: number;
  // Denied from the over-limit cache (upstream's over_limit_with_local_cache statistic).
  fromLocalCache?: boolean;
}

// Wraps the request's store round trip, e.g. in a tracing span; absent (and nothing allocated)
// when tracing is off.
export interface StoreTracer {
  decide(store: Store, checks: readonly LimitCheck[], options: DecideOptions): Promise<Decision>;
}

export interface LimitDecision {
  overall: Code;
  // One per request descriptor, in request order.
  results: DescriptorResult[];
  // The shared store could not decide; a fallback did.
  degraded?: { policy: 'local' | 'allow'; reason: string };
}

// Request-level hits_addend 0 means 1; a descriptor-level value wins, and 0 there means "check only".
export function hitsFor(request: RateLimitRequest, index: number): number {
  const own = request.descriptors[index].hitsAddend;
  return own !== undefined ? own : Math.max(1, request.hitsAddend);
}

// Finds each descriptor's limit and applies `replaces` and `unlimited` as envoyproxy/ratelimit
// does: names replaced by any matched limit of the request (unlimited ones included) are dropped.
export function limitsFor(config: CompiledConfig, request: RateLimitRequest): (MatchedLimit | undefined)[] {
  const matched = request.descriptors.map((d) => match(config, request.domain, d));
  let replaced: Set<string> | undefined;
  for (const m of matched) {
    if (m === undefined || m.rule.replaces.length === 0) continue;
    replaced ??= new Set();
    for (const name of m.rule.replaces) replaced.add(name);
  }
  if (replaced === undefined) return matched;
  const names = replaced;
  return matched.map((m) => (m && m.rule.name !== '' && names.has(m.rule.name) ? undefined : m));
}

function modeOf(rule: RateLimitRule, settings: LimiterSettings): LimitMode {
  if (rule.shadowMode || settings.globalShadowMode) return 'shadow';
  if (rule.quotaMode || settings.globalQuotaMode) return 'quota';
  return 'enforce';
}

function toCheck(request: RateLimitRequest, m: MatchedLimit, hits: number, settings: LimiterSettings): LimitCheck {
  const rule = m.rule;
  const parts = { domain: request.domain, entries: m.counterEntries, algorithm: rule.algorithm, periodMs: rule.periodMs, ipPrefix: rule.ipPrefix };
  const upstream = settings.keys.layout === 'upstream' && hasUpstreamKey(rule.algorithm, rule.periodMs);
  const check: LimitCheck = {
    key: upstream ? upstreamKey(parts, settings.keys.prefix, Date.now()) : counterKey(parts, settings.keys),
    algorithm: rule.algorithm,
    limit: rule.requestsPerUnit,
    periodMs: rule.periodMs,
    burst: rule.burst,
    hits,
    mode: modeOf(rule, settings),
    lease: rule.leaseSize,
  };
  if (upstream) check.layout = 'upstream';
  return check;
}

export interface Plan {
  limits: (MatchedLimit | undefined)[];
  // The store checks, and for each descriptor the index of its check (none: no limit, unlimited).
  checks: LimitCheck[];
  checkIndex: (number | undefined)[];
}

// What a request asks of the store: one check per limited descriptor.
export function planRequest(config: CompiledConfig, request: RateLimitRequest, settings: LimiterSettings): Plan {
  const limits = limitsFor(config, request);
  const checks: LimitCheck[] = [];
  const checkIndex: (number | undefined)[] = [];
  limits.forEach((m, i) => {
    if (m === undefined || m.rule.unlimited) return;
    checkIndex[i] = checks.length;
    checks.push(toCheck(request, m, hitsFor(request, i), settings));
  });
  return { limits, checks, checkIndex };
}

// Decides a whole request: one store call for all of its limits. With `peek`, the store only
// says what it would decide (the explain endpoint) and nothing is consumed.
export async function decideRequest(
  config: CompiledConfig,
  request: RateLimitRequest,
  store: Store,
  settings: LimiterSettings,
  options: { deadlineAt?: number; caller?: { readonly cancelled: boolean }; peek?: boolean; trace?: StoreTracer } = {},
): Promise<LimitDecision & { plan: Plan }> {
  const plan = planRequest(config, request, settings);
  const { limits, checks, checkIndex } = plan;
  const storeOptions = { countDeniedHits: settings.countDeniedHits, domain: request.domain, deadlineAt: options.deadlineAt, caller: options.caller };
  let decision: Decision = { admitted: true, outcomes: [] };
  if (checks.length > 0 && options.peek) decision = await store.peek(checks, storeOptions);
  else if (checks.length > 0) decision = options.trace ? await options.trace.decide(store, checks, storeOptions) : await store.decide(checks, storeOptions);
  const results = limits.map((m, i) => {
    const index = checkIndex[i];
    return resultFor(m, index === undefined ? undefined : checks[index], decision, index, hitsFor(request, i));
  });
  const overall: Code = decision.admitted || settings.globalShadowMode ? 'OK' : 'OVER_LIMIT';
  return { overall, results, degraded: decision.degraded, plan };
}

function resultFor(m: MatchedLimit | undefined, check: LimitCheck | undefined, decision: Decision, index: number | undefined, hits: number): DescriptorResult {
  if (m === undefined) return { kind: 'no_limit', code: 'OK', hits, remaining: 0, wouldDeny: false, consumed: false, usedBefore: 0 };
  if (check === undefined || index === undefined) {
    return { kind: 'unlimited', code: 'OK', rule: m.rule, matched: m, hits, remaining: MAX_UINT32, wouldDeny: false, consumed: false, usedBefore: 0 };
  }
  const o = decision.outcomes[index];
  // Per-rule shadow mode reports OK; global shadow mode keeps the descriptor's OVER_LIMIT and only
  // turns the overall code to OK (upstream's behaviour).
  const code: Code = o.allowed || m.rule.shadowMode ? 'OK' : 'OVER_LIMIT';
  const result: DescriptorResult = {
    kind: 'limited',
    code,
    rule: m.rule,
    matched: m,
    mode: check.mode,
    hits,
    remaining: !o.allowed ? 0 : o.remaining === undefined ? undefined : Math.min(o.remaining, MAX_UINT32),
    resetMs: o.resetMs,
    retryAfterMs: o.allowed ? undefined : o.retryAfterMs,
    wouldDeny: !o.allowed,
    consumed: o.consumed,
    usedBefore: o.usedBefore,
  };
  if (o.fromLocalCache) result.fromLocalCache = true;
  return result;
}
