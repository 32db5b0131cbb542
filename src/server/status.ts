import { status as GrpcStatus } from '@grpc/grpc-js';
import { CancelledError, InvalidRequestError, UnavailableError } from '../errors';

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
