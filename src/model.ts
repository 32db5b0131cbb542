// Domain types shared by config, keys, limiter and store. Plain TypeScript: no grpc-js, no
// generated protobuf types (only service/ and server/ know those).

export const UNITS = ['second', 'minute', 'hour', 'day', 'week', 'month', 'year'] as const;
export type Unit = (typeof UNITS)[number];

// Seconds per unit, as envoyproxy/ratelimit counts them (a month is 30 days, a year 365).
export const UNIT_SECONDS: Readonly<Record<Unit, number>> = {
  second: 1,
  minute: 60,
  hour: 3600,
  day: 86_400,
  week: 604_800,
  month: 2_592_000,
  year: 31_536_000,
};

// The largest uint32: Envoy's fields for limits and remaining counts are uint32 on the wire.
export const MAX_UINT32 = 4_294_967_295;

export const ALGORITHMS = ['fixed_window', 'sliding_window', 'token_bucket', 'gcra'] as const;
export type Algorithm = (typeof ALGORITHMS)[number];

export interface Entry {
  key: string;
  value: string;
}

export interface LimitOverride {
  requestsPerUnit: number;
  unit: Unit;
}

export interface Descriptor {
  entries: Entry[];
  // Caller-chosen limit (RateLimitDescriptor.limit); replaces the configured one.
  limitOverride?: LimitOverride;
  // Descriptor-level hits_addend. undefined = use the request's; 0 = check without consuming.
  hitsAddend?: number;
}

export interface RateLimitRequest {
  domain: string;
  descriptors: Descriptor[];
  // Request-level hits_addend; 0 means 1, as in Envoy's API.
  hitsAddend: number;
}

export type Code = 'OK' | 'OVER_LIMIT';

// How a limit's "no" affects the request (see limiter/decide.ts for the rules).
export type LimitMode = 'enforce' | 'shadow' | 'quota';
