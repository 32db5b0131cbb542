import type { CompiledConfig } from '../config/types';
import { decideRequest, type LimiterSettings } from '../limiter/limiter';
import type { RateLimitRequest } from '../model';
import type { Store } from '../store/store';

// The explain endpoint: for each descriptor of a request, the rule that matches (or why none
// does), the counter key it uses, the counter's current state and the decision that would be
// made, without consuming anything.
export async function explainRequest(
  config: CompiledConfig,
  request: RateLimitRequest,
  store: Store,
  settings: LimiterSettings,
): Promise<Record<string, unknown>> {
  const decision = await decideRequest(config, request, store, settings, { peek: true });
  const { plan } = decision;
  const descriptors = request.descriptors.map((d, i) => {
    const m = plan.limits[i];
    const r = decision.results[i];
    const index = plan.checkIndex[i];
    const out: Record<string, unknown> = { entries: d.entries, hits: r.hits, code: r.code };
    if (m === undefined) {
      out.rule = null;
      out.why = 'no rule matches (or its rule is replaced by another limit of this request)';
      return out;
    }
    const rule = m.rule;
    out.rule = {
      fullKey: rule.fullKey,
      statKey: m.statKey,
      name: rule.name,
      source: rule.source,
      fromOverride: m.fromOverride,
      unlimited: rule.unlimited,
      algorithm: rule.algorithm,
      requestsPerUnit: rule.requestsPerUnit,
      unit: rule.unit,
      periodMs: rule.periodMs,
      burst: rule.burst,
      shadowMode: rule.shadowMode,
      quotaMode: rule.quotaMode,
      lease: rule.leaseSize ?? null,
    };
    if (index === undefined) return out;
    const check = plan.checks[index];
    out.key = check.key;
    out.mode = check.mode;
    out.wouldAllow = !r.wouldDeny;
    // null = not known (e.g. the `allow` fallback answered): shown as such, never as a number.
    const known = r.remaining !== undefined;
    out.remainingKnown = known;
    out.remaining = r.remaining ?? null;
    out.resetMs = r.resetMs === undefined ? null : Math.ceil(r.resetMs);
    out.usedNow = known ? r.usedBefore : null;
    if (r.retryAfterMs !== undefined) out.retryAfterMs = Number.isFinite(r.retryAfterMs) ? r.retryAfterMs : 'never';
    return out;
  });
  return { domain: request.domain, overall: decision.overall, consumed: false, degraded: decision.degraded ?? null, descriptors };
}
