import { status as GrpcStatus } from '@grpc/grpc-js';
import { CancelledError, InvalidRequestError, UnavailableError } from '../errors';
import type { Logger } from '../logger';

export interface MappedError {
  grpc: GrpcStatus;
  http: number;
  // Label for the requests metric.
  label: 'INVALID_ARGUMENT' | 'UNAVAILABLE' | 'CANCELLED' | 'INTERNAL';
  message: string;
}

// The one place where sluice's errors become wire status codes.
export function mapError(err: unknown): MappedError {
  if (err instanceof InvalidRequestError) {
    return { grpc: GrpcStatus.INVALID_ARGUMENT, http: 400, label: 'INVALID_ARGUMENT', message: err.message };
  }
  // 499: nginx's (and Envoy's) code for a client that went away; nobody reads it.
  if (err instanceof CancelledError) {
    return { grpc: GrpcStatus.CANCELLED, http: 499, label: 'CANCELLED', message: err.message };
  }
  if (err instanceof UnavailableError) {
    return { grpc: GrpcStatus.UNAVAILABLE, http: 503, label: 'UNAVAILABLE', message: err.message };
  }
  return { grpc: GrpcStatus.INTERNAL, http: 500, label: 'INTERNAL', message: 'internal error' };
}

const REFUSAL_LOG_EVERY_MS = 10_000;

// How a listener logs the calls it could not answer with a decision. A refused request is decided
// by the caller's failure mode (Envoy's failure_mode_deny, which by default lets it through
// unlimited), so refusals must not go unnoticed: a warn line at most every 10 s per listener, with
// the latest reason (e.g. a request bound set too tight); the others at debug.
export function failureLog(logger: Logger, transport: string): (mapped: MappedError, err: unknown) => void {
  let lastWarn = -Infinity;
  let refused = 0;
  return (mapped, err) => {
    if (mapped.label === 'INTERNAL') {
      logger.error({ err, event: 'internal_error', transport }, 'ShouldRateLimit failed');
      return;
    }
    if (mapped.label === 'INVALID_ARGUMENT') {
      refused++;
      const now = Date.now();
      if (now - lastWarn >= REFUSAL_LOG_EVERY_MS) {
        logger.warn(
          { event: 'requests_refused', transport, refused, error: mapped.message },
          `refused ${refused} malformed or oversized request(s); the caller's failure mode decides them: ${mapped.message}`,
        );
        lastWarn = now;
        refused = 0;
        return;
      }
    }
    logger.debug({ event: 'request_error', transport, code: mapped.label, error: mapped.message }, mapped.message);
  };
}
