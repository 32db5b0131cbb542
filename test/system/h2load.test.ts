import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import type { RateLimitRequest } from '../../src/gen/envoy/service/ratelimit/v3/rls';
import { FLEET_ALGORITHMS, H2LOAD_MISSING, h2loadAvailable, runFleet } from '../../bench/fleet';
import { stopAll } from '../support/redis';

// Envoy-like pressure on a healthy fleet with the default settings: 2 replicas on one Redis, each
// driven by its own h2load (4 connections × 32 streams, grpc-timeout 1S, as Envoy sends a deadline
// on every call) at the same time. A healthy Redis must mean 0 degraded answers and a breaker
// that never moves, however busy the replicas are (hot keys go through the automatic leases).

const REPLICAS = 2;
const REQUESTS = 20_000;

after(() => stopAll());

test(`h2load 4×32 streams with grpc-timeout 1S against ${REPLICAS} replicas on a healthy Redis: 0 degraded, 0 breaker transitions, every answer grpc-status 0`, async (t) => {
  // Not a skip: without h2load this property would silently go unchecked.
  assert.ok(h2loadAvailable(), H2LOAD_MISSING);
  // One request deciding a limit of every algorithm (all-or-nothing in one script call).
  const request: RateLimitRequest = {
    domain: 'bench',
    descriptors: FLEET_ALGORITHMS.map((a) => ({ entries: [{ key: a, value: 'tenant-1' }] })),
    hitsAddend: 0,
  };
  const started = Date.now();
  const figures = await runFleet({ replicas: REPLICAS, requests: REQUESTS, request });
  figures.forEach((f, i) =>
    t.diagnostic(
      `replica ${i}: ${f.run.reqPerSec.toFixed(0)} req/s, ${f.run.succeeded}/${f.run.requests} succeeded, ${f.run.status2xx} 2xx, ` +
        `max ${f.run.maxRequestMs.toFixed(1)} ms; degraded ${f.degraded}, breaker transitions ${f.breakerTransitions}, served from leases ${f.leaseServed}, grpc codes ${JSON.stringify(f.grpcCodes)}`,
    ),
  );
  t.diagnostic(`${figures[0].run.command} (per replica, ${Date.now() - started} ms in all)`);

  figures.forEach((f, i) => {
    const label = `replica ${i}`;
    assert.equal(f.run.succeeded, REQUESTS, `${label}: h2load: ${f.run.output}`);
    assert.equal(f.run.status2xx, REQUESTS, `${label}: h2load: ${f.run.output}`);
    assert.equal(f.degraded, 0, `${label}: ${f.degraded} degraded decisions`);
    assert.equal(f.breakerTransitions, 0, `${label}: ${f.breakerTransitions} breaker transitions`);
    // grpc-status is in the trailers, which h2load does not report; sluice's own count of what it
    // answered must be every request, each a decision (OK or OVER_LIMIT), none UNAVAILABLE/INTERNAL.
    const codes = f.grpcCodes;
    assert.equal(codes.UNAVAILABLE ?? 0, 0, `${label}: UNAVAILABLE answers: ${JSON.stringify(codes)}`);
    assert.equal(codes.INTERNAL ?? 0, 0, `${label}: INTERNAL answers: ${JSON.stringify(codes)}`);
    const decisions = (codes.OK ?? 0) + (codes.OVER_LIMIT ?? 0);
    const all = Object.values(codes).reduce((a, b) => a + b, 0);
    assert.equal(all - decisions, 0, `${label}: answers that were not decisions: ${JSON.stringify(codes)}`);
    assert.ok(decisions >= REQUESTS, `${label}: only ${decisions} decisions for ${REQUESTS} requests`);
    // The server itself answers DEADLINE_EXCEEDED (still HTTP 200) when the 1 s grpc-timeout runs
    // out, which neither h2load nor the counter above would show: a request h2load saw completed
    // within 1 s cannot have been answered that way.
    assert.ok(f.run.maxRequestMs < 1000, `${label}: a request took ${f.run.maxRequestMs} ms, so may have been answered DEADLINE_EXCEEDED`);
  });
});
