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

function statusOf(r: DescriptorResult): PbStatus {
  const status: PbStatus = { code: r.code === 'OK' ? PbCode.OK : PbCode.OVER_LIMIT, limitRemaining: r.remaining };
  if (r.kind === 'limited' && r.rule !== undefined) {
    status.currentLimit = { name: r.rule.name, requestsPerUnit: r.rule.requestsPerUnit, unit: PB_UNIT[r.rule.unit] };
    status.durationUntilReset = { seconds: ceilSeconds(r.resetMs ?? 0), nanos: 0 };
  }
  return status;
}

// The descriptor the RateLimit-* headers describe: the last one over the limit, else the one with
// the least remaining (upstream's choice).
function headerDescriptor(results: DescriptorResult[]): DescriptorResult | undefined {
  let chosen: DescriptorResult | undefined;
  for (const r of results) {
    if (r.kind !== 'limited') continue;
    if (r.code === 'OVER_LIMIT') chosen = r;
    else if (chosen === undefined || (chosen.code === 'OK' && r.remaining < chosen.remaining)) chosen = r;
  }
  return chosen;
}

// The request passes only when all of its over-limit descriptors pass again: the longest wait.
function retryAfterSeconds(results: DescriptorResult[]): number | undefined {
  let longest: number | undefined;
  for (const r of results) {
    if (r.code !== 'OVER_LIMIT' || r.retryAfterMs === undefined) continue;
    const wait = Number.isFinite(r.retryAfterMs) ? r.retryAfterMs : (r.rule?.periodMs ?? 0);
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
    out.push({ key: h.reset, value: String(ceilSeconds(chosen.resetMs ?? 0)), rawValue: Buffer.alloc(0) });
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

// Degraded answers always say so in dynamic metadata, whether or not the request metadata is on.
function dynamicMetadataOf(request: RateLimitRequest, decision: LimitDecision, options: ResponseOptions): Record<string, unknown> | undefined {
  const out = options.dynamicMetadata ? metadataOf(request, decision) : undefined;
  if (decision.degraded === undefined) return out;
  return { ...out, degraded: true, degradedPolicy: decision.degraded.policy, degradedReason: decision.degraded.reason };
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
