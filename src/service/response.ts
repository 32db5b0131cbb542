import type { HeaderValue } from '../gen/envoy/config/core/v3/base';
import {
  type RateLimitResponse as PbResponse,
  type RateLimitResponse_DescriptorStatus as PbStatus,
  RateLimitResponse_Code as PbCode,
  RateLimitResponse_RateLimit_Unit as PbUnit,
} from '../gen/envoy/service/ratelimit/v3/rls';
import type { DescriptorResult, LimitDecision } from '../limiter/limiter';
import type { RateLimitRequest, Unit } from '../model';

export interface ResponseOptions {
  headers?: { limit: string; remaining: string; reset: string };
  retryAfter?: string;
  dynamicMetadata: boolean;
  degradedHeader?: string;
}

const PB_UNIT: Record<Unit, PbUnit> = {
  second: PbUnit.SECOND,
  minute: PbUnit.MINUTE,
  hour: PbUnit.HOUR,
  day: PbUnit.DAY,
  week: PbUnit.WEEK,
  month: PbUnit.MONTH,
  year: PbUnit.YEAR,
};

// Envoy turns duration_until_reset into whole seconds by truncation; rounding up here keeps a
// client from retrying before the reset (upstream likewise reports 1..unit seconds).
function ceilSeconds(ms: number): number {
  return ms <= 0 ? 0 : Math.ceil(ms / 1000);
}

// Envoy's DescriptorStatus has no "unknown" for limit_remaining (a plain uint32), so an unknown
// is marked by what is left out: limit_remaining stays 0 and duration_until_reset is unset (a
// known status always carries it, even "0s"). current_limit is still sent: the limit itself comes
// from the config and is known. An unknown reset alone (remaining known) likewise leaves
// duration_until_reset unset. dynamic metadata `unknownRemaining` lists the unknown descriptors.
function statusOf(r: DescriptorResult): PbStatus {
  const status: PbStatus = { code: r.code === 'OK' ? PbCode.OK : PbCode.OVER_LIMIT, limitRemaining: r.remaining ?? 0 };
  if (r.kind === 'limited' && r.rule !== undefined) {
    status.currentLimit = { name: r.rule.name, requestsPerUnit: r.rule.requestsPerUnit, unit: PB_UNIT[r.rule.unit] };
    if (r.remaining !== undefined && r.resetMs !== undefined) {
      status.durationUntilReset = { seconds: ceilSeconds(r.resetMs), nanos: 0 };
    }
  }
  return status;
}

// The descriptor the RateLimit-* headers describe: the last one over the limit, else the one with
// the least remaining (upstream's choice), among those whose remaining is known: headers for an
// unknown would have to make a number up.
function headerDescriptor(results: DescriptorResult[]): (DescriptorResult & { remaining: number }) | undefined {
  let chosen: (DescriptorResult & { remaining: number }) | undefined;
  for (const r of results) {
    if (r.kind !== 'limited' || !hasKnownRemaining(r)) continue;
    if (r.code === 'OVER_LIMIT') chosen = r;
    else if (chosen === undefined || (chosen.code === 'OK' && r.remaining < chosen.remaining)) chosen = r;
  }
  return chosen;
}

function hasKnownRemaining(r: DescriptorResult): r is DescriptorResult & { remaining: number } {
  return r.remaining !== undefined;
}

// The request passes only when all of its over-limit descriptors pass again: the longest wait.
// Hits that can never pass (more than the limit, or a limit of 0) have no such time: Retry-After
// is then the descriptor's reset, as its status says, so the two numbers never disagree.
function retryAfterSeconds(results: DescriptorResult[]): number | undefined {
  let longest: number | undefined;
  for (const r of results) {
    if (r.code !== 'OVER_LIMIT' || r.retryAfterMs === undefined) continue;
    const wait = Number.isFinite(r.retryAfterMs) ? r.retryAfterMs : (r.resetMs ?? r.rule?.periodMs ?? 0);
    longest = Math.max(longest ?? 0, wait);
  }
  return longest === undefined ? undefined : Math.max(1, ceilSeconds(longest));
}

function headersOf(decision: LimitDecision, options: ResponseOptions): HeaderValue[] {
  const out: HeaderValue[] = [];
  const h = options.headers;
  const chosen = h === undefined ? undefined : headerDescriptor(decision.results);
  if (h !== undefined && chosen?.rule !== undefined) {
    out.push({ key: h.limit, value: String(chosen.rule.requestsPerUnit), rawValue: Buffer.alloc(0) });
    out.push({ key: h.remaining, value: String(chosen.remaining), rawValue: Buffer.alloc(0) });
    if (chosen.resetMs !== undefined) out.push({ key: h.reset, value: String(ceilSeconds(chosen.resetMs)), rawValue: Buffer.alloc(0) });
  }
  if (decision.degraded !== undefined && options.degradedHeader) {
    out.push({ key: options.degradedHeader, value: 'true', rawValue: Buffer.alloc(0) });
  }
  if (options.retryAfter !== undefined && decision.overall === 'OVER_LIMIT') {
    const seconds = retryAfterSeconds(decision.results);
    if (seconds !== undefined) out.push({ key: options.retryAfter, value: String(seconds), rawValue: Buffer.alloc(0) });
  }
  return out;
}

// Upstream's dynamic metadata: the domain, each descriptor's entries, hits, and the merged
// `metadata` of the rules whose descriptors passed.
function metadataOf(request: RateLimitRequest, decision: LimitDecision): Record<string, unknown> {
  const descriptors = request.descriptors.map((d) => {
    const s: Record<string, unknown> = { entries: d.entries.map((e) => `${e.key}=${e.value}`) };
    if (d.limitOverride) s.limit = `requests_per_unit:${d.limitOverride.requestsPerUnit} unit:${d.limitOverride.unit.toUpperCase()}`;
    if (d.hitsAddend !== undefined) s.hitsAddend = d.hitsAddend;
    return s;
  });
  const out: Record<string, unknown> = { domain: request.domain, descriptors };
  if (request.hitsAddend !== 0) out.hitsAddend = request.hitsAddend;
  const merged: Record<string, unknown> = {};
  decision.results.forEach((r) => {
    if (r.code === 'OK' && r.kind === 'limited' && r.rule?.metadata) mergeInto(merged, r.rule.metadata);
  });
  if (Object.keys(merged).length > 0) out.metadata = merged;
  return out;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

// First writer wins, nested maps merge (upstream's mergeMetadata).
function mergeInto(dest: Record<string, unknown>, src: Record<string, unknown>): void {
  for (const [k, v] of Object.entries(src)) {
    const existing = dest[k];
    if (existing === undefined) dest[k] = v;
    else if (isPlainObject(existing) && isPlainObject(v)) mergeInto(existing, v);
  }
}

// Indices (request order) of the descriptors whose remaining is not known.
function unknownRemainingOf(decision: LimitDecision): number[] {
  const out: number[] = [];
  decision.results.forEach((r, i) => {
    if (r.remaining === undefined) out.push(i);
  });
  return out;
}

// Degraded answers always say so in dynamic metadata, and unknown numbers are always listed
// (`unknownRemaining`), whether or not the request metadata is on: the wire status alone cannot
// tell an unknown remaining from a real 0.
function dynamicMetadataOf(request: RateLimitRequest, decision: LimitDecision, options: ResponseOptions): Record<string, unknown> | undefined {
  let out = options.dynamicMetadata ? metadataOf(request, decision) : undefined;
  if (decision.degraded !== undefined) {
    out = { ...out, degraded: true, degradedPolicy: decision.degraded.policy, degradedReason: decision.degraded.reason };
  }
  const unknown = unknownRemainingOf(decision);
  if (unknown.length > 0) out = { ...out, unknownRemaining: unknown };
  return out;
}

export function responseToProto(request: RateLimitRequest, decision: LimitDecision, options: ResponseOptions): PbResponse {
  return {
    overallCode: decision.overall === 'OK' ? PbCode.OK : PbCode.OVER_LIMIT,
    statuses: decision.results.map(statusOf),
    responseHeadersToAdd: headersOf(decision, options),
    requestHeadersToAdd: [],
    rawBody: Buffer.alloc(0),
    dynamicMetadata: dynamicMetadataOf(request, decision, options),
  };
}
