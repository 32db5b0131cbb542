import { InvalidRequestError } from '../errors';
import type { RateLimitRequest as PbRequest } from '../gen/envoy/service/ratelimit/v3/rls';
import { RateLimitUnit } from '../gen/envoy/type/v3/ratelimit_unit';
import type { Descriptor, RateLimitRequest, Unit } from '../model';

// Envoy caps hits_addend at 1e9 (MAX_HITS_ADDEND); beyond it a value is surely a bug.
const MAX_HITS = 1_000_000_000;

const UNIT_OF: Partial<Record<RateLimitUnit, Unit>> = {
  [RateLimitUnit.SECOND]: 'second',
  [RateLimitUnit.MINUTE]: 'minute',
  [RateLimitUnit.HOUR]: 'hour',
  [RateLimitUnit.DAY]: 'day',
  [RateLimitUnit.WEEK]: 'week',
  [RateLimitUnit.MONTH]: 'month',
  [RateLimitUnit.YEAR]: 'year',
};

function descriptorFrom(d: PbRequest['descriptors'][number], i: number): Descriptor {
  if (d.entries.length === 0) throw new InvalidRequestError(`descriptor ${i} has no entries`);
  d.entries.forEach((e, j) => {
    if (e.key === '') throw new InvalidRequestError(`descriptor ${i} entry ${j} has an empty key`);
  });
  const out: Descriptor = { entries: d.entries.map((e) => ({ key: e.key, value: e.value })) };
  if (d.limit !== undefined) {
    const unit = UNIT_OF[d.limit.unit];
    if (unit === undefined) throw new InvalidRequestError(`descriptor ${i} limit override has no valid unit`);
    out.limitOverride = { requestsPerUnit: d.limit.requestsPerUnit, unit };
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
export function requestFromProto(req: PbRequest): RateLimitRequest {
  if (req.domain === '') throw new InvalidRequestError('rate limit domain must not be empty');
  if (req.descriptors.length === 0) throw new InvalidRequestError('rate limit descriptor list must not be empty');
  if (req.hitsAddend > MAX_HITS) throw new InvalidRequestError(`hits_addend must be 0..${MAX_HITS}`);
  return { domain: req.domain, descriptors: req.descriptors.map(descriptorFrom), hitsAddend: req.hitsAddend };
}
