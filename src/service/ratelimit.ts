import { type Clock, monotonicClock } from '../clock';
import type { ConfigHolder } from '../config/holder';
import { CancelledError, UnavailableError } from '../errors';
import type { RateLimitRequest as PbRequest, RateLimitResponse as PbResponse } from '../gen/envoy/service/ratelimit/v3/rls';
import { decideRequest, type LimiterSettings, type LimitDecision } from '../limiter/limiter';
import type { Logger } from '../logger';
import type { RateLimitRequest } from '../model';
import type { Settings } from '../settings';
import type { Store } from '../store/store';
import type { CallSpan, DecisionSink } from './decision-sink';
import { explainRequest } from './explain';
import { requestBounds, requestFromProto, type RequestBounds } from './request';
import { responseToProto, type ResponseOptions } from './response';
import { UnknownDomainLog } from './unknown-domain-log';

export interface ServiceDeps {
  config: ConfigHolder;
  store: Store;
  settings: Settings;
  // Where decisions are reported (metrics).
  sink: DecisionSink;
  logger: Logger;
  // Times the unknown-domain log lines (tests move it).
  clock?: Clock;
}

// ShouldRateLimit, independent of the transport (gRPC and HTTP /json both call it).
export class RateLimitService {
  // Also how RLQS (service/rlqs/) finds a bucket's counter: the same keys as RLS.
  readonly limiter: LimiterSettings;
  private readonly responseOptions: ResponseOptions;
  // What one request may carry; the transports also size their byte caps from it.
  readonly bounds: RequestBounds;
  private readonly unknownDomains: UnknownDomainLog;

  constructor(private readonly deps: ServiceDeps) {
    const s = deps.settings;
    this.bounds = requestBounds(s);
    this.unknownDomains = new UnknownDomainLog(deps.logger, deps.clock ?? monotonicClock);
    this.limiter = {
      keys: {
        prefix: s.cacheKeyPrefix,
        hashTag: s.hashTag,
        hashing: { secret: s.keyHashSecret, maxLength: s.keyHashMaxValueLength, keys: new Set(s.keyHashKeys) },
        // Only a shared store has keys another service could read.
        layout: s.store === 'redis' ? s.keyLayout : 'sluice',
      },
      countDeniedHits: s.countDeniedHits,
      globalShadowMode: s.globalShadowMode,
      globalQuotaMode: s.globalQuotaMode,
    };
    this.responseOptions = {
      headers: s.responseHeadersEnabled ? { limit: s.headerLimit, remaining: s.headerRemaining, reset: s.headerReset } : undefined,
      retryAfter: s.retryAfterEnabled ? s.headerRetryAfter : undefined,
      dynamicMetadata: s.responseDynamicMetadata,
      degradedHeader: s.degradedHeader,
    };
  }

  // Throws InvalidRequestError for a malformed request and UnavailableError when no decision can
  // be made; never answers UNKNOWN.
  async shouldRateLimit(pb: PbRequest, call: { deadlineAt?: number; trace?: CallSpan; caller?: { readonly cancelled: boolean } } = {}): Promise<PbResponse> {
    const request = requestFromProto(pb, this.bounds);
    call.trace?.describe(request.domain, request.descriptors.length);
    const config = this.deps.config.config;
    if (config === undefined) throw new UnavailableError('no rate limit configuration loaded');
    let decision: LimitDecision;
    try {
      decision = await decideRequest(config, request, this.deps.store, this.limiter, { deadlineAt: call.deadlineAt, trace: call.trace, caller: call.caller });
    } catch (err) {
      throw err instanceof UnavailableError || err instanceof CancelledError ? err : new UnavailableError('counter store failed', { cause: err });
    }
    this.record(request, decision);
    if (!config.domains.has(request.domain)) this.unknownDomain(request, config.domains);
    return responseToProto(request, decision, this.responseOptions);
  }

  async explain(pb: PbRequest): Promise<Record<string, unknown>> {
    const request = requestFromProto(pb, this.bounds);
    const config = this.deps.config.config;
    if (config === undefined) throw new UnavailableError('no rate limit configuration loaded');
    try {
      return await explainRequest(config, request, this.deps.store, this.limiter);
    } catch (err) {
      throw err instanceof UnavailableError ? err : new UnavailableError('counter store failed', { cause: err });
    }
  }

  // As upstream, OK with no limit; counted and logged so that a misspelt domain can be noticed.
  private unknownDomain(request: RateLimitRequest, known: ReadonlyMap<string, unknown>): void {
    this.deps.sink.unknownDomain(request.domain, request.descriptors.length);
    this.unknownDomains.note(request.domain, request.descriptors.length, () => known.keys());
  }

  private record(request: RateLimitRequest, decision: LimitDecision): void {
    this.deps.sink.decided(decision.results);
    const log = this.deps.logger;
    if (log.isLevelEnabled('debug')) {
      log.debug(
        {
          event: 'decision',
          domain: request.domain,
          overall: decision.overall,
          descriptors: request.descriptors.map((d, i) => ({
            entries: d.entries,
            code: decision.results[i].code,
            rule: decision.results[i].rule?.fullKey,
            remaining: decision.results[i].remaining ?? null,
            hits: decision.results[i].hits,
          })),
        },
        'ShouldRateLimit',
      );
    }
  }
}
