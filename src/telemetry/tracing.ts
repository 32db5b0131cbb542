import { randomUUID } from 'node:crypto';
import type http from 'node:http';
import type * as grpc from '@grpc/grpc-js';
import type * as Api from '@opentelemetry/api';
import type { SpanExporter } from '@opentelemetry/sdk-trace-base';
import type { Logger } from '../logger';
import type { CallSpan } from '../service/decision-sink';
import { otlpHeaders, redactRedisUrl, type Settings } from '../settings';
import type { Decision, DecideOptions, LimitCheck, Store } from '../store/store';
import { answeredWithin } from '../store/timeout';

// OpenTelemetry tracing: one SERVER span per ShouldRateLimit (gRPC, POST /json) continuing the
// caller's W3C traceparent, with a child span around the request's store round trip. Off by
// default, and then nothing of OpenTelemetry is loaded (the packages are required only in the "on"
// branch) and a call costs one function call that returns undefined.

// What a transport and the service see of one call's span; all of it is skipped when tracing is
// off or the call is not sampled (startCall returned undefined).
export interface CallTrace extends CallSpan {
  // code: OK, OVER_LIMIT, or the error label (INVALID_ARGUMENT, UNAVAILABLE, INTERNAL); status: the
  // transport's (gRPC status name, HTTP status code); message: why it failed.
  end(code: string, status: string | number, message?: string): void;
}

type Transport = 'grpc' | 'http';

// A gRPC call (its metadata) or an HTTP request (its headers): read only when tracing is on, as
// the http2 gRPC server builds a call's metadata when asked.
export type Carrier = { readonly metadata: grpc.Metadata } | http.IncomingMessage;

export interface Tracer {
  startCall(transport: Transport, carrier: Carrier): CallTrace | undefined;
  // Exports the spans still buffered; called once the servers have drained.
  shutdown(): Promise<void>;
}

const SHUTDOWN_EXPORT_MS = 5000;

const OFF: Tracer = { startCall: () => undefined, shutdown: async () => undefined };

// Span attributes (README "Tracing" lists them).
const ATTR = {
  domain: 'ratelimit.domain',
  descriptors: 'ratelimit.descriptors',
  code: 'ratelimit.code',
  store: 'ratelimit.store',
  degraded: 'ratelimit.degraded',
  checks: 'ratelimit.checks',
} as const;

export const GRPC_SPAN = 'envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';
export const HTTP_SPAN = 'POST /json';
export const STORE_SPAN = 'ratelimit.store.decide';

export function createTracer(settings: Settings, logger: Logger): Tracer {
  return settings.tracingEnabled ? otelTracer(settings, logger) : OFF;
}

// Where spans go: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as given; else OTEL_EXPORTER_OTLP_ENDPOINT (or
// the protocol's default collector) plus /v1/traces over http, or as given over grpc (the OTLP spec's rule).
export function tracesUrl(s: Settings): string {
  if (s.otlpTracesEndpoint !== '') return s.otlpTracesEndpoint;
  const grpc = s.tracingExporterProtocol === 'grpc';
  const base = s.otlpEndpoint !== '' ? s.otlpEndpoint : grpc ? 'http://localhost:4317' : 'http://localhost:4318';
  return grpc ? base : `${base.replace(/\/+$/, '')}/v1/traces`;
}

function exporter(s: Settings): SpanExporter {
  const url = tracesUrl(s);
  const headers = otlpHeaders(s.otlpHeaders);
  if (s.tracingExporterProtocol === 'grpc') {
    const { OTLPTraceExporter } = require('@opentelemetry/exporter-trace-otlp-grpc') as typeof import('@opentelemetry/exporter-trace-otlp-grpc');
    const { Metadata } = require('@grpc/grpc-js') as typeof import('@grpc/grpc-js');
    const metadata = new Metadata();
    for (const [key, value] of Object.entries(headers)) metadata.set(key, value);
    return new OTLPTraceExporter({ url, metadata });
  }
  const { OTLPTraceExporter } = require('@opentelemetry/exporter-trace-otlp-http') as typeof import('@opentelemetry/exporter-trace-otlp-http');
  return new OTLPTraceExporter({ url, headers });
}

function otelTracer(s: Settings, logger: Logger): Tracer {
  const api = require('@opentelemetry/api') as typeof import('@opentelemetry/api');
  const sdk = require('@opentelemetry/sdk-trace-base') as typeof import('@opentelemetry/sdk-trace-base');
  const { defaultResource, resourceFromAttributes } = require('@opentelemetry/resources') as typeof import('@opentelemetry/resources');
  const { W3CTraceContextPropagator } = require('@opentelemetry/core') as typeof import('@opentelemetry/core');
  const semconv = require('@opentelemetry/semantic-conventions') as typeof import('@opentelemetry/semantic-conventions');
  // As upstream: without TRACING_SERVICE_INSTANCE_ID, a random id per process.
  const instanceId = s.tracingServiceInstanceId || randomUUID();
  const resource = defaultResource().merge(
    resourceFromAttributes({
      [semconv.ATTR_SERVICE_NAME]: s.tracingServiceName,
      [semconv.ATTR_SERVICE_NAMESPACE]: s.tracingServiceNamespace,
      [semconv.ATTR_SERVICE_INSTANCE_ID]: instanceId,
    }),
  );
  const provider = new sdk.BasicTracerProvider({
    resource,
    // A caller's sampled flag decides for its trace; traces started here are sampled at the rate.
    sampler: new sdk.ParentBasedSampler({ root: new sdk.TraceIdRatioBasedSampler(s.tracingSamplingRate) }),
    spanProcessors: [new sdk.BatchSpanProcessor(exporter(s))],
  });
  // Failed exports are reported only on OpenTelemetry's diagnostic channel (silent by default).
  const warn = (message: string, ...args: unknown[]) => logger.warn({ event: 'tracing_error', detail: args.map(String) }, `tracing: ${message}`);
  const quiet = () => undefined;
  api.diag.setLogger({ error: warn, warn, info: quiet, debug: quiet, verbose: quiet }, { logLevel: api.DiagLogLevel.WARN, suppressOverrideMessage: true });
  const tracer = provider.getTracer('sluice');
  const propagator = new W3CTraceContextPropagator();
  const start = startSpan(api, tracer, propagator, semconv);
  // The store call leaves the process only with Redis.
  const storeKind = s.store === 'redis' ? api.SpanKind.CLIENT : api.SpanKind.INTERNAL;
  const status = { grpc: semconv.ATTR_RPC_STATUS_CODE, http: semconv.ATTR_HTTP_RESPONSE_STATUS_CODE };
  logger.info(
    {
      event: 'tracing',
      protocol: s.tracingExporterProtocol,
      url: redactRedisUrl(tracesUrl(s)),
      serviceName: s.tracingServiceName,
      serviceNamespace: s.tracingServiceNamespace,
      serviceInstanceId: instanceId,
      samplingRate: s.tracingSamplingRate,
    },
    `tracing on: OTLP over ${s.tracingExporterProtocol} to ${tracesUrl(s)}, service ${s.tracingServiceName}, sampling rate ${s.tracingSamplingRate}`,
  );
  return {
    startCall(transport, carrier) {
      const span = start(transport, carrier, s.store);
      return span.isRecording() ? new OtelCall(api, tracer, span, { store: s.store, storeKind, statusAttribute: status[transport] }) : undefined;
    },
    // A collector that is down must not hold up or fail the stop: the exporter retries for up to
    // its own timeout; what is not sent by then is given up, said in a warning.
    shutdown: () =>
      answeredWithin(provider.shutdown(), SHUTDOWN_EXPORT_MS, 'the collector').catch((err: unknown) => {
        logger.warn(
          { event: 'tracing_error', error: (err as Error).message },
          `tracing: the spans buffered at shutdown were not exported (${(err as Error).message})`,
        );
      }),
  };
}

type Propagator = import('@opentelemetry/core').W3CTraceContextPropagator;
type Semconv = typeof import('@opentelemetry/semantic-conventions');

// traceparent / tracestate from gRPC metadata (the first value) or HTTP headers.
const GETTERS: Record<Transport, Api.TextMapGetter<unknown>> = {
  grpc: {
    keys: (carrier) => Object.keys((carrier as grpc.Metadata).getMap()),
    get: (carrier, key) => {
      const value = (carrier as grpc.Metadata).get(key)[0];
      return typeof value === 'string' ? value : undefined;
    },
  },
  http: {
    keys: (carrier) => Object.keys(carrier as http.IncomingHttpHeaders),
    get: (carrier, key) => (carrier as http.IncomingHttpHeaders)[key],
  },
};

function startSpan(api: typeof Api, tracer: Api.Tracer, propagator: Propagator, semconv: Semconv) {
  return (transport: Transport, carrier: Carrier, store: string): Api.Span => {
    const headers = 'metadata' in carrier ? carrier.metadata : carrier.headers;
    const parent = propagator.extract(api.ROOT_CONTEXT, headers, GETTERS[transport]);
    const attributes: Api.Attributes =
      transport === 'grpc'
        ? { [semconv.ATTR_RPC_SYSTEM_NAME]: semconv.RPC_SYSTEM_NAME_VALUE_GRPC, [semconv.ATTR_RPC_METHOD]: GRPC_SPAN, [ATTR.store]: store }
        : { [semconv.ATTR_HTTP_REQUEST_METHOD]: 'POST', [semconv.ATTR_HTTP_ROUTE]: '/json', [ATTR.store]: store };
    return tracer.startSpan(transport === 'grpc' ? GRPC_SPAN : HTTP_SPAN, { kind: api.SpanKind.SERVER, attributes }, parent);
  };
}

// Only errors of ours mark a span failed: a refused request is the caller's (as OTel's gRPC and
// HTTP server conventions say), OVER_LIMIT is an answer.
const FAILED = new Set(['UNAVAILABLE', 'INTERNAL']);

class OtelCall implements CallTrace {
  private degraded = false;

  constructor(
    private readonly api: typeof Api,
    private readonly tracer: Api.Tracer,
    private readonly span: Api.Span,
    private readonly o: { store: string; storeKind: Api.SpanKind; statusAttribute: string },
  ) {}

  describe(domain: string, descriptors: number): void {
    this.span.setAttribute(ATTR.domain, domain);
    this.span.setAttribute(ATTR.descriptors, descriptors);
  }

  async decide(store: Store, checks: readonly LimitCheck[], options: DecideOptions): Promise<Decision> {
    const context = this.api.trace.setSpan(this.api.ROOT_CONTEXT, this.span);
    const child = this.tracer.startSpan(
      STORE_SPAN,
      { kind: this.o.storeKind, attributes: { [ATTR.store]: this.o.store, [ATTR.checks]: checks.length } },
      context,
    );
    try {
      const decision = await store.decide(checks, options);
      this.degraded = decision.degraded !== undefined;
      child.setAttribute(ATTR.degraded, this.degraded);
      return decision;
    } catch (err) {
      child.setStatus({ code: this.api.SpanStatusCode.ERROR, message: (err as Error).message });
      throw err;
    } finally {
      child.end();
    }
  }

  end(code: string, status: string | number, message?: string): void {
    const span = this.span;
    span.setAttribute(ATTR.code, code);
    span.setAttribute(ATTR.degraded, this.degraded);
    span.setAttribute(this.o.statusAttribute, status);
    if (FAILED.has(code)) span.setStatus({ code: this.api.SpanStatusCode.ERROR, message });
    span.end();
  }
}
