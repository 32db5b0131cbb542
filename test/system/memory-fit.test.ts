import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import { cgroupMemoryLimit, estimateMb, memoryFitWarning } from '../../src/server/memory-fit';
import { cgroupCpuLimit } from '../../src/server/workers';
import { REPO, spawnServer } from '../support/process';

// WORKERS=auto and the container's limits, read from cgroup files under a root tests point at a
// directory of fake ones (v1 and v2, set and unset).

function cgroupDir(files: Record<string, string>): string {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-cgroup-'));
  for (const [name, text] of Object.entries(files)) {
    fs.mkdirSync(path.dirname(path.join(root, name)), { recursive: true });
    fs.writeFileSync(path.join(root, name), text);
  }
  return root;
}

describe('cgroup limits', () => {
  test('CPU: v2 cpu.max and v1 cfs quota, set and unset', () => {
    const cpu = (files: Record<string, string>) => cgroupCpuLimit(undefined, cgroupDir(files));
    assert.equal(cpu({ 'cpu.max': '250000 100000\n' }), 2.5);
    assert.equal(cpu({ 'cpu.max': 'max 100000\n' }), undefined);
    assert.equal(cpu({ 'cpu/cpu.cfs_quota_us': '150000\n', 'cpu/cpu.cfs_period_us': '100000\n' }), 1.5);
    assert.equal(cpu({ 'cpu/cpu.cfs_quota_us': '-1\n', 'cpu/cpu.cfs_period_us': '100000\n' }), undefined);
    assert.equal(cpu({}), undefined);
  });

  test('memory: v2 memory.max and v1 memory.limit_in_bytes, set and unset', () => {
    const memory = (files: Record<string, string>) => cgroupMemoryLimit(cgroupDir(files));
    assert.equal(memory({ 'memory.max': '268435456\n' }), 268435456);
    assert.equal(memory({ 'memory.max': 'max\n' }), undefined);
    assert.equal(memory({ 'memory/memory.limit_in_bytes': '536870912\n' }), 536870912);
    // v1's "no limit": 2^63 rounded down to a page.
    assert.equal(memory({ 'memory/memory.limit_in_bytes': '9223372036854771712\n' }), undefined);
    assert.equal(memory({}), undefined);
  });

  test('the estimate: a primary beside several workers, and the config in each', () => {
    assert.ok(estimateMb(2, 0) > 2 * estimateMb(1, 0), 'the primary of WORKERS=2 counts');
    assert.ok(estimateMb(1, 2 << 20) > estimateMb(1, 0) + 150, 'a 2 MiB config costs one process well over 150 MB');
    assert.equal(memoryFitWarning({ workers: 8, why: 'WORKERS=auto', configBytes: 3000, limitBytes: undefined }), undefined);
    assert.equal(memoryFitWarning({ workers: 1, why: 'WORKERS=1', configBytes: 3000, limitBytes: 256 * 2 ** 20 }), undefined);
    const line = memoryFitWarning({ workers: 8, why: 'WORKERS=auto: 8 cores this process may use', configBytes: 3000, limitBytes: 256 * 2 ** 20 });
    assert.match(line ?? '', /^WORKERS=8 .*needs about \d+ MB.*memory limit is 268 MB/);
  });
});

describe('a warning at start when the memory limit cannot hold the workers', () => {
  test('one warn line naming WORKERS and the limit; none under a limit that holds them', async () => {
    const config = path.join(REPO, 'examples/config');
    const small = await spawnServer(['--config', config, '--workers', '1'], { SLUICE_CGROUP_ROOT: cgroupDir({ 'memory.max': '20000000\n' }) });
    const roomy = await spawnServer(['--config', config, '--workers', '1'], { SLUICE_CGROUP_ROOT: cgroupDir({ 'memory.max': 'max\n' }) });
    try {
      await small.waitForLog((l) => l.event === 'memory_limit_low');
      // Logged in the same tick as the warning would be.
      await roomy.waitForLog((l) => l.event === 'workers');
      const warnings = small.logs.filter((l) => l.event === 'memory_limit_low');
      assert.equal(warnings.length, 1, JSON.stringify(warnings));
      assert.equal(warnings[0].level, 'warn');
      assert.equal(warnings[0].workers, 1);
      assert.equal(warnings[0].limitBytes, 20_000_000);
      assert.match(String(warnings[0].msg), /^WORKERS=1 .*memory limit is 20 MB/);
      assert.equal(roomy.logs.filter((l) => l.event === 'memory_limit_low').length, 0);
    } finally {
      await small.stop();
      await roomy.stop();
    }
  });
});
