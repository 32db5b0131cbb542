import type { DescriptorResult, StoreTracer } from '../limiter/limiter';

// What the service reports of the calls it decides. The service owns the interface and is handed
// an implementation (src/telemetry/decision-sink.ts turns it into metrics); it never imports its
// transports or their telemetry.
export interface DecisionSink {
  // A decided request's per-descriptor results, in request order.
  decided(results: readonly DescriptorResult[]): void;
  // A call for a domain no config defines (answered OK with no limit, as upstream).
  unknownDomain(domain: string, descriptors: number): void;
}

// One call's trace span as the service sees it; the transport starts and ends it
// (telemetry/observe-call.ts), the service names the request and traces its store round trip.
export interface CallSpan extends StoreTracer {
  // The request's domain and descriptor count, once it is known to be a valid request.
  describe(domain: string, descriptors: number): void;
}
