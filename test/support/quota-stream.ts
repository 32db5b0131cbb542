import assert from 'node:assert/strict';
import type * as grpc from '@grpc/grpc-js';
import type {
  RateLimitQuotaResponse,
  RateLimitQuotaResponse_BucketAction as Action,
  RateLimitQuotaServiceClient,
  RateLimitQuotaUsageReports,
} from '../../src/gen/envoy/service/rate_limit_quota/v3/rlqs';
import { RateLimitStrategy_BlanketRule as Blanket } from '../../src/gen/envoy/type/v3/ratelimit_strategy';

// One Envoy's RLQS stream, as a test drives it: send a report, read the answer.
export class QuotaStream {
  private readonly answers: RateLimitQuotaResponse[] = [];
  private readonly waiting: { resolve: (r: RateLimitQuotaResponse) => void; reject: (err: Error) => void }[] = [];
  private over: Error | undefined;
  readonly ended: Promise<grpc.ServiceError | undefined>;
  readonly call: grpc.ClientDuplexStream<RateLimitQuotaUsageReports, RateLimitQuotaResponse>;

  constructor(client: RateLimitQuotaServiceClient) {
    this.call = client.streamRateLimitQuotas();
    this.call.on('data', (r: RateLimitQuotaResponse) => {
      const next = this.waiting.shift();
      if (next !== undefined) next.resolve(r);
      else this.answers.push(r);
    });
    this.ended = new Promise((resolve) => {
      this.call.on('error', (err: grpc.ServiceError) => resolve(err));
      this.call.on('end', () => resolve(undefined));
    });
    // A stream that ends fails whoever waits for an answer on it.
    void this.ended.then((err) => {
      this.over = err ?? new Error('stream ended');
      for (const w of this.waiting.splice(0)) w.reject(this.over);
    });
  }

  next(): Promise<RateLimitQuotaResponse> {
    const ready = this.answers.shift();
    if (ready !== undefined) return Promise.resolve(ready);
    if (this.over !== undefined) return Promise.reject(this.over);
    return new Promise((resolve, reject) => this.waiting.push({ resolve, reject }));
  }

  async report(domain: string, usages: { bucket: Record<string, string>; allowed?: number; denied?: number; elapsedS?: number }[]): Promise<Action[]> {
    this.call.write({
      domain,
      bucketQuotaUsages: usages.map((u) => ({
        bucketId: { bucket: u.bucket },
        timeElapsed: { seconds: u.elapsedS ?? 0, nanos: 0 },
        numRequestsAllowed: u.allowed ?? 0,
        numRequestsDenied: u.denied ?? 0,
      })),
    });
    return (await this.next()).bucketAction;
  }
}

// What an action tells Envoy: units of a token bucket, a blanket rule, or abandon.
export function summary(a: Action): { tokens?: number; blanket?: 'ALLOW_ALL' | 'DENY_ALL'; abandon?: true; ttlS?: number } {
  const action = a.bucketAction;
  if (action?.$case === 'abandonAction') return { abandon: true };
  assert.equal(action?.$case, 'quotaAssignmentAction');
  const strategy = action.value.rateLimitStrategy?.strategy;
  const ttlS = action.value.assignmentTimeToLive?.seconds;
  if (strategy?.$case === 'tokenBucket') return { tokens: strategy.value.maxTokens, ttlS };
  assert.equal(strategy?.$case, 'blanketRule');
  return { blanket: strategy.value === Blanket.DENY_ALL ? 'DENY_ALL' : 'ALLOW_ALL', ttlS };
}
