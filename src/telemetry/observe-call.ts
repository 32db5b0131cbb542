import { type Logger, logEvery } from '../logger';
import type { Metrics } from './metrics';
import type { CallTrace, Carrier, Tracer } from './tracing';

// What every transport records of a ShouldRateLimit call, in one place: its duration
// (sluice_request_duration_seconds), its trace span, the call counted by result
// (sluice_requests_total) and, for a call answered with an error, the throttled failure log.

export type CallTransport = 'grpc' | 'http';

export interface CallTelemetry {
  metrics: Metrics;
  logger: Logger;
  tracer?: Tracer;
}

// A call the transport could not answer with a decision: the requests metric's label
// (INVALID_ARGUMENT, UNAVAILABLE, CANCELLED, INTERNAL) and why (server/status.ts maps errors to it).
export interface CallFailure {
  label: string;
  message: string;
}

export interface ObservedCall {
  // Handed to the service (it names the request and traces the store round trip).
  readonly trace: CallTrace | undefined;
  // Answered with a decision: code OK or OVER_LIMIT; status the transport's (gRPC status name, HTTP code).
  answered(code: string, status: string | number): void;
  // Answered with an error; err is logged with it when it is ours (INTERNAL).
  failed(failure: CallFailure, status: string | number, err: unknown): void;
}

// A listener's observer (made once per listener): each call it is given starts a timer and a span;
// the failure log is the listener's, so that its refusals are counted and throttled together.
export function observeCall(t: CallTelemetry, transport: CallTransport): (carrier: Carrier) => ObservedCall {
  const logFailure = failureLog(t.logger, transport);
  return (carrier) => {
    const stopTimer = t.metrics.requestDuration.startTimer({ transport });
    const trace = t.tracer?.startCall(transport, carrier);
    return {
      trace,
      answered(code, status) {
        stopTimer();
        t.metrics.requests.inc({ transport, code });
        trace?.end(code, status);
      },
      failed(failure, status, err) {
        stopTimer();
        t.metrics.requests.inc({ transport, code: failure.label });
        trace?.end(failure.label, status, failure.message);
        logFailure(failure, err);
      },
    };
  };
}

const REFUSAL_LOG_EVERY_MS = 10_000;

// How a listener logs the calls it could not answer with a decision. A refused request is decided
// by the caller's failure mode (Envoy's failure_mode_deny, which by default lets it through
// unlimited), so refusals must not go unnoticed: a warn line at most every 10 s per listener, with
// the latest reason (e.g. a request bound set too tight); the others at debug.
function failureLog(logger: Logger, transport: string): (failure: CallFailure, err: unknown) => void {
  const refusals = logEvery(REFUSAL_LOG_EVERY_MS);
  return (mapped, err) => {
    if (mapped.label === 'INTERNAL') {
      logger.error({ err, event: 'internal_error', transport }, 'ShouldRateLimit failed');
      return;
    }
    const unlogged = mapped.label === 'INVALID_ARGUMENT' ? refusals() : undefined;
    if (unlogged !== undefined) {
      const refused = unlogged + 1;
      logger.warn(
        { event: 'requests_refused', transport, refused, error: mapped.message },
        `refused ${refused} malformed or oversized request(s); the caller's failure mode decides them: ${mapped.message}`,
      );
      return;
    }
    logger.debug({ event: 'request_error', transport, code: mapped.label, error: mapped.message }, mapped.message);
  };
}
