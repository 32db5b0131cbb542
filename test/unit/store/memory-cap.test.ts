import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { test } from 'node:test';
import { RateLimitResponse_Code as Code } from '../../../src/gen/envoy/service/ratelimit/v3/rls';
import { createLogger } from '../../../src/logger';
import { d, startApp } from '../../support/app';
import path from 'node:path';

// At the key cap with every counter live, nothing is evicted: new keys are decided by the
// approximate tier, which is logged (rate-limited) and counted, and an exhausted tenant stays denied.
test('at the memory key cap no live counter is evicted; overflow is logged once and counted', async () => {
  const lines: Record<string, unknown>[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const l of chunk.toString().split('\n')) if (l.trim() !== '') lines.push(JSON.parse(l));
      done();
    },
  });
  const s = await startApp({ configPaths: [path.resolve(__dirname, '../../../../examples/config')], memoryMaxKeys: 5 }, { logger: createLogger('info', sink) });
  try {
    const tenant = (t: string) => s.call({ domain: 'edge', descriptors: [d(['tenant', t])] });
    // The free tier: 10 a minute. Exhaust t0, then fill the other 4 slots.
    for (let i = 0; i < 10; i++) assert.equal((await tenant('t0')).overallCode, Code.OK);
    assert.equal((await tenant('t0')).overallCode, Code.OVER_LIMIT);
    for (let i = 1; i < 5; i++) await tenant(`t${i}`);
    for (let i = 5; i < 13; i++) assert.equal((await tenant(`t${i}`)).overallCode, Code.OK);
    assert.equal((await tenant('t0')).overallCode, Code.OVER_LIMIT);
    const overflow = lines.filter((l) => l.event === 'memory_store_overflow');
    assert.equal(overflow.length, 1);
    assert.equal(overflow[0].level, 'warn');
    assert.equal(overflow[0].maxKeys, 5);
    assert.equal(lines.filter((l) => l.event === 'memory_store_evicting').length, 0);
    const metrics = await (await s.http('/metrics')).text();
    assert.match(metrics, /^sluice_memory_store_evictions_total 0$/m);
    assert.match(metrics, /^sluice_memory_store_overflow_decisions_total 8$/m);
    assert.match(metrics, /^sluice_memory_store_keys 5$/m);
    const bytes = Number(/^sluice_memory_store_overflow_bytes (\d+)$/m.exec(metrics)?.[1]);
    assert.ok(bytes > 0 && bytes <= 1 << 20, `overflow bytes ${bytes}`);
  } finally {
    await s.stop();
  }
});
