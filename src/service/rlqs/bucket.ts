import { wildcardMatch } from '../../config/match';
import type { DescriptorNode } from '../../config/types';
import { InvalidRequestError } from '../../errors';
import type { RateLimitQuotaUsageReports } from '../../gen/envoy/service/rate_limit_quota/v3/rlqs';
import type { Entry } from '../../model';
import { checkText, MAX_HITS, overBound, type RequestBounds } from '../request';

// One bucket's usage in a report, validated.
export interface BucketUsage {
  // The bucket id as Envoy sent it (echoed in the answer, so that Envoy finds its bucket).
  bucket: Record<string, string>;
  // The same, one string whatever the order Envoy's map came in: identifies the bucket.
  id: string;
  allowed: number;
  denied: number;
  // Seconds since the bucket's previous report; 0 in Envoy's first report of a new bucket.
  elapsedS: number;
}

export interface UsageReport {
  domain: string;
  usages: BucketUsage[];
}

// The report, or InvalidRequestError naming what is wrong (the stream ends INVALID_ARGUMENT).
// The bounds are RLS's: a bucket is a descriptor (MAX_DESCRIPTOR_ENTRIES entries, MAX_VALUE_BYTES per
// text) and a report holds at most MAX_DESCRIPTORS buckets.
export function validateReport(pb: RateLimitQuotaUsageReports, bounds: RequestBounds): UsageReport {
  if (pb.domain === '') throw new InvalidRequestError('usage report domain must not be empty');
  checkText('usage report domain', pb.domain, bounds);
  if (pb.bucketQuotaUsages.length === 0) throw new InvalidRequestError('usage report has no bucket_quota_usages');
  if (pb.bucketQuotaUsages.length > bounds.maxDescriptors) throw overBound('usage report', pb.bucketQuotaUsages.length, 'maxDescriptors', bounds, 'buckets');
  const usages = pb.bucketQuotaUsages.map((u, i): BucketUsage => {
    const where = `bucket_quota_usages[${i}]`;
    const bucket = u.bucketId?.bucket;
    const entries = bucket === undefined ? [] : Object.entries(bucket);
    if (entries.length === 0) throw new InvalidRequestError(`${where} has no bucket_id entries`);
    if (entries.length > bounds.maxDescriptorEntries) throw overBound(where, entries.length, 'maxDescriptorEntries', bounds, 'bucket_id entries');
    for (const [key, value] of entries) {
      if (key === '' || value === '') throw new InvalidRequestError(`${where} bucket_id has an empty key or value`);
      checkText(`${where} bucket_id key`, key, bounds);
      checkText(`${where} bucket_id value`, value, bounds);
    }
    const elapsed = u.timeElapsed;
    if (elapsed !== undefined && (elapsed.seconds < 0 || elapsed.nanos < 0)) throw new InvalidRequestError(`${where} time_elapsed must not be negative`);
    for (const [name, n] of [
      ['num_requests_allowed', u.numRequestsAllowed],
      ['num_requests_denied', u.numRequestsDenied],
    ] as const) {
      if (!Number.isSafeInteger(n) || n < 0 || n > MAX_HITS) throw new InvalidRequestError(`${where} ${name} must be 0..${MAX_HITS}`);
    }
    entries.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
    return {
      bucket,
      id: JSON.stringify(entries),
      allowed: u.numRequestsAllowed,
      denied: u.numRequestsDenied,
      elapsedS: elapsed === undefined ? 0 : elapsed.seconds + elapsed.nanos / 1e9,
    } as BucketUsage;
  });
  return { domain: pb.domain, usages };
}

// A bucket id is a map: its entries have no order, a descriptor's do. The order is the config's:
// from the domain's root, the first key the rules of this level declare (YAML order) that the
// bucket has and whose value this level matches (exact value, then wildcards, then the value-less
// rule, as RLS matches) is the next entry. The bucket matches when every entry is used this way
// and the node reached has a rule; the descriptor is then the one an RLS request for the same rule
// sends, so both count on one counter. undefined: no rule.
export function bucketEntries(root: DescriptorNode | undefined, bucket: Record<string, string>): Entry[] | undefined {
  if (root === undefined) return undefined;
  const total = Object.keys(bucket).length;
  const out: Entry[] = [];
  const used = new Set<string>();
  let node = root;
  while (used.size < total) {
    let next: DescriptorNode | undefined;
    for (const [key, branch] of node.children) {
      if (used.has(key) || !Object.hasOwn(bucket, key)) continue;
      const value = bucket[key];
      next = branch.values.get(value) ?? branch.wildcards.find((w) => wildcardMatch(w.parts, value))?.node ?? branch.defaultNode;
      if (next === undefined) continue;
      out.push({ key, value });
      used.add(key);
      break;
    }
    if (next === undefined) return undefined;
    node = next;
  }
  return node.rule === undefined ? undefined : out;
}
