import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { baselineLines, type PeerRow, peerBaseline, peerRounds } from '../../../bench/peer';

// The peer section's comparison with another build (BENCH_PEER_BASELINE, BENCH_PEER_ROUNDS)
// without running it: its knobs and its lines.

const row = (server: PeerRow['server'], descriptors: number, keys: number, reqPerSec: number, cpu: number): PeerRow => ({
  server,
  descriptors,
  keys,
  reqPerSec,
  p50Ms: 1,
  p99Ms: 2,
  serverCpuUsPerReq: cpu,
  redisCpuUsPerDescriptor: 1,
  redisCommandsPerReq: 0.1,
  rateRatio: 1,
  cpuRatio: 1,
  redisRatio: 1,
});

test('BENCH_PEER_BASELINE: a checkout with a build, named by its commit; a checkout without one is refused, saying what to run', () => {
  assert.equal(peerBaseline(undefined), undefined);
  assert.equal(peerBaseline(''), undefined);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'peer-baseline-'));
  try {
    assert.throws(() => peerBaseline(dir), /BENCH_PEER_BASELINE=.*no .*dist\/src\/main\.js; run npm ci && npm run build in that checkout first/);
    fs.mkdirSync(path.join(dir, 'dist', 'src'), { recursive: true });
    fs.writeFileSync(path.join(dir, 'dist', 'src', 'main.js'), '');
    // Not a git checkout: named by its folder.
    assert.deepEqual(peerBaseline(dir), { dir, main: path.join(dir, 'dist', 'src', 'main.js'), label: path.basename(dir) });
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('BENCH_PEER_ROUNDS: 2 by default, a whole number above 0 otherwise', () => {
  assert.equal(peerRounds(undefined), 2);
  assert.equal(peerRounds('5'), 5);
  for (const bad of ['0', '-1', '1.5', 'x'])
    assert.throws(() => peerRounds(bad), new RegExp(`BENCH_PEER_ROUNDS=${bad.replace('.', '\\.')}: expected a whole number above 0`));
});

test("baselineLines: each sluice row against the baseline's row of the same shape and leases", () => {
  const baseline = { dir: '/b', main: '/b/dist/src/main.js', label: 'abc1234' };
  const rows = [
    row('upstream', 1, 1, 8000, 110),
    row('sluice, leases off', 1, 1, 30000, 30),
    row('sluice, leases on', 1, 1, 50000, 20),
    row('baseline abc1234, leases off', 1, 1, 40000, 24),
    row('baseline abc1234, leases on', 1, 1, 50000, 25),
    row('sluice, leases off', 3, 100_000, 10000, 60),
    row('baseline abc1234, leases off', 3, 100_000, 8000, 75),
  ];
  // Rows without their rounds: the best rounds only, and no line over every round.
  assert.deepEqual(baselineLines(rows, baseline), [
    "1 descriptor, one hot key, leases off: decisions/s 0.75×, server CPU per request 1.25× the baseline's (best rounds)",
    "1 descriptor, one hot key, leases on: decisions/s 1.00×, server CPU per request 0.80× the baseline's (best rounds)",
    "3 descriptors, 100,000 keys, leases off: decisions/s 1.25×, server CPU per request 0.80× the baseline's (best rounds)",
  ]);
});

test("baselineLines: each round's CPU against the baseline's in the same round, per row and over the run", () => {
  const baseline = { dir: '/b', main: '/b/dist/src/main.js', label: 'abc1234' };
  const rounds = (...cpu: number[]) => cpu.map((c) => ({ reqPerSec: 1e6 / c, serverCpuUsPerReq: c }));
  // Leases off: the best rounds say 20 against 25 µs, 0.80×; round by round this build costs 0.50×,
  // 0.88× and 1.20× the baseline's, median 0.88×: a noisy round (the baseline's 40) is one ratio of
  // three, not the whole comparison.
  const rows: PeerRow[] = [
    { ...row('sluice, leases off', 1, 1, 50000, 20), rounds: rounds(20, 22, 30) },
    { ...row('baseline abc1234, leases off', 1, 1, 40000, 25), rounds: rounds(40, 25, 25) },
    { ...row('sluice, leases on', 1, 1, 50000, 20), rounds: rounds(20, 33) },
    { ...row('baseline abc1234, leases on', 1, 1, 50000, 20), rounds: rounds(20, 30) },
  ];
  assert.deepEqual(baselineLines(rows, baseline), [
    "1 descriptor, one hot key, leases off: decisions/s 1.25×, server CPU per request 0.80× the baseline's (best rounds); paired rounds: CPU median 0.88× (n 3, 0.50–1.20)",
    "1 descriptor, one hot key, leases on: decisions/s 1.00×, server CPU per request 1.00× the baseline's (best rounds); paired rounds: CPU median 1.05× (n 2, 1.00–1.10)",
    "every row and round: server CPU per request median 1.00× (n 5, 0.50–1.20) the baseline's",
  ]);
});
