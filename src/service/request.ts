import { isUtf8 } from 'node:buffer';
import { InvalidRequestError } from '../errors';
import type { RateLimitRequest as PbRequest } from '../gen/envoy/service/ratelimit/v3/rls';
import { RateLimitUnit } from '../gen/envoy/type/v3/ratelimit_unit';
import { type Descriptor, MAX_UINT32, type RateLimitRequest, type Unit } from '../model';
import { defaultSettings, type Settings } from '../settings';

// Envoy caps hits_addend at 1e9 (MAX_HITS_ADDEND); beyond it a value is surely a bug.
export const MAX_HITS = 1_000_000_000;

// What one request may carry. Checked before any counter is touched, so that no request, whatever
// its size, costs more than a bounded amount of work or reaches the store (where a slow call would
// count against the breaker for everyone).
export interface RequestBounds {
  maxDescriptors: number;
  maxDescriptorEntries: number;
  maxValueBytes: number;
  maxRequestBytes: number;
}

function pick(s: Pick<Settings, keyof RequestBounds>): RequestBounds {
  return { maxDescriptors: s.maxDescriptors, maxDescriptorEntries: s.maxDescriptorEntries, maxValueBytes: s.maxValueBytes, maxRequestBytes: s.maxRequestBytes };
}

// The defaults of settings.ts, for callers (tests, tools) that give no settings.
export const DEFAULT_BOUNDS: RequestBounds = pick(defaultSettings());

// A hand-built Settings object without the bounds gets the defaults, not "unbounded".
export function requestBounds(s: Partial<Pick<Settings, keyof RequestBounds>>): RequestBounds {
  const d = DEFAULT_BOUNDS;
  return {
    maxDescriptors: s.maxDescriptors ?? d.maxDescriptors,
    maxDescriptorEntries: s.maxDescriptorEntries ?? d.maxDescriptorEntries,
    maxValueBytes: s.maxValueBytes ?? d.maxValueBytes,
    maxRequestBytes: s.maxRequestBytes ?? d.maxRequestBytes,
  };
}

const SETTING_OF: Record<keyof RequestBounds, string> = {
  maxDescriptors: 'MAX_DESCRIPTORS, --max-descriptors',
  maxDescriptorEntries: 'MAX_DESCRIPTOR_ENTRIES, --max-descriptor-entries',
  maxValueBytes: 'MAX_VALUE_BYTES, --max-value-bytes',
  maxRequestBytes: 'MAX_REQUEST_BYTES, --max-request-bytes',
};

// "<what> has <n> <unit>; at most <max> allowed (<setting>)": names the bound and the setting.
// `n` is a count, or "more than <max>" where the exact count cannot be known.
export function overBound(what: string, n: number | string, bound: keyof RequestBounds, bounds: RequestBounds, unit: string): InvalidRequestError {
  return new InvalidRequestError(`${what} ${overText(n, bound, bounds, unit)}`);
}

function overText(n: number | string, bound: keyof RequestBounds, bounds: RequestBounds, unit: string): string {
  return `has ${n} ${unit}; at most ${bounds[bound]} allowed (${SETTING_OF[bound]})`;
}

export function checkDescriptorCount(n: number, bounds: RequestBounds): void {
  if (n > bounds.maxDescriptors) throw overBound('request', n, 'maxDescriptors', bounds, 'descriptors');
}

export function checkEntryCount(i: number, n: number, bounds: RequestBounds): void {
  if (n > bounds.maxDescriptorEntries) throw overBound(`descriptor ${i}`, n, 'maxDescriptorEntries', bounds, 'entries');
}

// proto3 strings are UTF-8: a lone surrogate (possible in JSON text, "\ud800") has no UTF-8 form,
// and two different byte strings must never share one counter.
export function checkText(what: string, s: string, bounds: RequestBounds): void {
  const fault = textFault(s, bounds);
  if (fault !== undefined) throw new InvalidRequestError(`${what} ${fault}`);
}

// What is wrong with a text, as the end of an error message (after the text's name); undefined
// when nothing is, so that a valid request builds no message.
function textFault(s: string, bounds: RequestBounds): string | undefined {
  if (!(s as unknown as { isWellFormed(): boolean }).isWellFormed()) return 'is not valid UTF-8 text';
  // UTF-8 takes at most 3 bytes per UTF-16 unit: only long strings need counting.
  if (s.length * 3 > bounds.maxValueBytes) {
    const bytes = Buffer.byteLength(s, 'utf8');
    if (bytes > bounds.maxValueBytes) return overText(bytes, 'maxValueBytes', bounds, 'bytes');
  }
  return undefined;
}

export function checkUtf8Bytes(what: string, bytes: Uint8Array): void {
  if (!isUtf8(bytes)) throw new InvalidRequestError(`${what} is not valid UTF-8`);
}

const UNIT_OF: Partial<Record<RateLimitUnit, Unit>> = {
  [RateLimitUnit.SECOND]: 'second',
  [RateLimitUnit.MINUTE]: 'minute',
  [RateLimitUnit.HOUR]: 'hour',
  [RateLimitUnit.DAY]: 'day',
  [RateLimitUnit.WEEK]: 'week',
  [RateLimitUnit.MONTH]: 'month',
  [RateLimitUnit.YEAR]: 'year',
};

function descriptorFrom(d: PbRequest['descriptors'][number], i: number, bounds: RequestBounds): Descriptor {
  const entries = d.entries;
  if (entries.length === 0) throw new InvalidRequestError(`descriptor ${i} has no entries`);
  checkEntryCount(i, entries.length, bounds);
  for (let j = 0; j < entries.length; j++) {
    const e = entries[j];
    if (e.key === '') throw new InvalidRequestError(`descriptor ${i} entry ${j} has an empty key`);
    const keyFault = textFault(e.key, bounds);
    if (keyFault !== undefined) throw new InvalidRequestError(`descriptor ${i} entry ${j} key ${keyFault}`);
    const valueFault = textFault(e.value, bounds);
    if (valueFault !== undefined) throw new InvalidRequestError(`descriptor ${i} entry ${j} value ${valueFault}`);
  }
  // The decoded entries are the model's (key and value, nothing else): kept, not copied.
  const out: Descriptor = { entries };
  if (d.limit !== undefined) {
    const unit = UNIT_OF[d.limit.unit];
    if (unit === undefined) throw new InvalidRequestError(`descriptor ${i} limit override has no valid unit`);
    const rpu = d.limit.requestsPerUnit;
    if (!Number.isInteger(rpu) || rpu < 0 || rpu > 0xffff_ffff) {
      throw new InvalidRequestError(`descriptor ${i} limit override requests_per_unit must be an integer 0..${MAX_UINT32}`);
    }
    out.limitOverride = { requestsPerUnit: rpu, unit };
  }
  if (d.hitsAddend !== undefined) {
    if (!Number.isSafeInteger(d.hitsAddend) || d.hitsAddend < 0 || d.hitsAddend > MAX_HITS) {
      throw new InvalidRequestError(`descriptor ${i} hits_addend must be 0..${MAX_HITS}`);
    }
    out.hitsAddend = d.hitsAddend;
  }
  return out;
}

// Validates a decoded RLS request and maps it to the domain model. The messages for an empty
// domain or descriptor list are upstream's.
export function requestFromProto(req: PbRequest, bounds: RequestBounds = DEFAULT_BOUNDS): RateLimitRequest {
  if (req.domain === '') throw new InvalidRequestError('rate limit domain must not be empty');
  checkText('domain', req.domain, bounds);
  if (req.descriptors.length === 0) throw new InvalidRequestError('rate limit descriptor list must not be empty');
  checkDescriptorCount(req.descriptors.length, bounds);
  if (!Number.isInteger(req.hitsAddend) || req.hitsAddend < 0 || req.hitsAddend > MAX_HITS) {
    throw new InvalidRequestError(`hits_addend must be 0..${MAX_HITS}`);
  }
  return {
    domain: req.domain,
    descriptors: req.descriptors.map((d, i) => descriptorFrom(d, i, bounds)),
    hitsAddend: req.hitsAddend,
  };
}
