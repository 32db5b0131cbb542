import type { RateLimitQuotaResponse_BucketAction as PbAction } from '../../gen/envoy/service/rate_limit_quota/v3/rlqs';
import { RateLimitStrategy_BlanketRule, type RateLimitStrategy } from '../../gen/envoy/type/v3/ratelimit_strategy';
import { MAX_UINT32 } from '../../model';

export type ActionKind = 'token_bucket' | 'allow_all' | 'deny_all' | 'abandon';

// A token bucket that (practically) never refills: Envoy gets `units` and no more until the next
// assignment. Envoy needs a refill (tokens_per_fill > 0, fill_interval ≥ 1 s): one token a day is
// at most a fraction of a token over an assignment's life.
const FILL_INTERVAL_S = 86_400;

function assignment(bucket: Record<string, string>, strategy: RateLimitStrategy, ttlS: number): PbAction {
  return {
    bucketId: { bucket },
    bucketAction: {
      $case: 'quotaAssignmentAction',
      value: { assignmentTimeToLive: { seconds: ttlS, nanos: 0 }, rateLimitStrategy: strategy },
    },
  };
}

// Envoy 1.40 keeps the tokens left in a bucket when a new assignment looks the same (it compares
// max_tokens, tokens_per_fill and only the nanos of fill_interval); every assignment is meant as a
// fresh bucket of `units`, so the nanos count the assignments.
export function tokens(bucket: Record<string, string>, units: number, ttlS: number, serial: number): { pb: PbAction; kind: ActionKind } {
  const strategy: RateLimitStrategy = {
    strategy: {
      $case: 'tokenBucket',
      value: { maxTokens: Math.min(units, MAX_UINT32), tokensPerFill: 1, fillInterval: { seconds: FILL_INTERVAL_S, nanos: 1 + (serial % 999_999_999) } },
    },
  };
  return { pb: assignment(bucket, strategy, ttlS), kind: 'token_bucket' };
}

export function allowAll(bucket: Record<string, string>, ttlS: number): { pb: PbAction; kind: ActionKind } {
  return { pb: assignment(bucket, { strategy: { $case: 'blanketRule', value: RateLimitStrategy_BlanketRule.ALLOW_ALL } }, ttlS), kind: 'allow_all' };
}

export function denyAll(bucket: Record<string, string>, ttlS: number): { pb: PbAction; kind: ActionKind } {
  return { pb: assignment(bucket, { strategy: { $case: 'blanketRule', value: RateLimitStrategy_BlanketRule.DENY_ALL } }, ttlS), kind: 'deny_all' };
}

export function abandon(bucket: Record<string, string>): { pb: PbAction; kind: ActionKind } {
  return { pb: { bucketId: { bucket }, bucketAction: { $case: 'abandonAction', value: {} } }, kind: 'abandon' };
}
