import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { test } from 'node:test';
import { createLogger } from '../src/logger';
import { d, startApp } from './support/app';
import path from 'node:path';

test('hitting the memory key cap evicts, logs one JSON line and counts it', async () => {
  const lines: Record<string, unknown>[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const l of chunk.toString().split('\n')) if (l.trim() !== '') lines.push(JSON.parse(l));
      done();
    },
  });
  const s = await startApp(
    { configPaths: [path.resolve(__dirname, '../../examples/config')], memoryMaxKeys: 5 },
    { logger: createLogger('info', sink) },
  );
  try {
    for (let i = 0; i < 8; i++) await s.call({ domain: 'edge', descriptors: [d(['tenant', `t${i}`])] });
    const evicting = lines.filter((l) => l.event === 'memory_store_evicting');
    assert.equal(evicting.length, 1);
    assert.equal(evicting[0].level, 'warn');
    assert.equal(evicting[0].maxKeys, 5);
    const metrics = await (await s.http('/metrics')).text();
    assert.match(metrics, /^sluice_memory_store_evictions_total 3$/m);
    assert.match(metrics, /^sluice_memory_store_keys 5$/m);
  } finally {
    await s.stop();
  }
});
