import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import { maxInAnyPeriod, parseSimulateArgs, simulate } from '../../src/simulate';
import { REPO, runCli } from '../support/process';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-simulate-'));

// Minimal well-formedness: one root <svg>, every tag closed in order, no stray '<' or '&'.
function assertWellFormedSvg(svg: string): void {
  assert.match(svg, /^<svg xmlns="http:\/\/www\.w3\.org\/2000\/svg"/);
  const stack: string[] = [];
  let roots = 0;
  const tag = /<(\/?)([a-zA-Z][\w-]*)((?:\s+[\w-]+="[^"<]*")*)\s*(\/?)>/g;
  let last = 0;
  for (let m = tag.exec(svg); m !== null; m = tag.exec(svg)) {
    const text = svg.slice(last, m.index);
    assert.doesNotMatch(text, /<|&(?!(amp|lt|gt|quot);)/, `stray markup before offset ${m.index}`);
    last = tag.lastIndex;
    const [, closing, name, , selfClosing] = m;
    if (closing === '/') assert.equal(stack.pop(), name, `</${name}> at ${m.index} closes another tag`);
    else if (selfClosing !== '/') {
      if (stack.length === 0) roots++;
      stack.push(name);
    } else assert.ok(stack.length > 0, `<${name}/> outside the root`);
  }
  assert.equal(svg.slice(last).trim(), '', 'text after the root');
  assert.deepEqual(stack, [], 'unclosed tags');
  assert.equal(roots, 1);
}

// "fixed_window: admitted 50/100; max admitted in any 1s: 10" → { fixed_window: [50, 100, 10] }
function parseSummary(stdout: string): Record<string, [number, number, number]> {
  const out: Record<string, [number, number, number]> = {};
  for (const m of stdout.matchAll(/^(\w+): admitted (\d+)\/(\d+).*; max admitted .*in any \S+: (\d+)$/gm)) {
    out[m[1]] = [Number(m[2]), Number(m[3]), Number(m[4])];
  }
  return out;
}

describe('sluice simulate', () => {
  test('--help prints its options; a bad argument exits 2 naming it', async () => {
    const help = await runCli(['simulate', '--help']);
    assert.equal(help.code, 0);
    for (const flag of ['--pattern', '--algorithm', '--limit', '--unit', '--period', '--burst', '--duration', '--out'])
      assert.ok(help.stdout.includes(flag), flag);
    const bad = await runCli(['simulate', '--pattern', 'sawtooth']);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /^sluice simulate: --pattern must be one of steady, edge-burst, ramp, two-tenants, not 'sawtooth'\n$/);
    const burst = await runCli(['simulate', '--algorithm', 'fixed_window', '--burst', '5']);
    assert.equal(burst.code, 2);
    assert.match(burst.stderr, /--burst only applies to algorithm token_bucket or gcra/);
    assert.match((await runCli(['--help'])).stdout, /sluice simulate .*\(sluice simulate --help\)/);
  });

  test('steady 20/s against 10/s fixed window: exactly 10 admitted in every window; SVG well formed and deterministic', async () => {
    const out = path.join(tmp, 'steady.svg');
    const args = ['simulate', '--pattern', 'steady', '--algorithm', 'fixed_window', '--limit', '10', '--unit', 'second', '--duration', '5s', '--out', out];
    const run = await runCli(args);
    assert.equal(run.code, 0, run.stderr);
    assert.deepEqual(parseSummary(run.stdout), { fixed_window: [50, 100, 10] });
    const svg = fs.readFileSync(out, 'utf8');
    assertWellFormedSvg(svg);
    assert.equal((svg.match(/<text [^>]*font-weight="bold">fixed_window: /g) ?? []).length, 1);
    assert.equal((await runCli(args)).code, 0);
    assert.equal(fs.readFileSync(out, 'utf8'), svg);

    const o = parseSimulateArgs(args.slice(1, -2));
    const r = simulate(o, 'fixed_window');
    const perWindow = [0, 1, 2, 3, 4].map((w) => r.admitted.filter((a) => Math.floor(a.atMs / 1000) === w).length);
    assert.deepEqual(perWindow, [10, 10, 10, 10, 10]);
    // The first half of each window: requests at 0, 50, …, 450 ms into it.
    assert.deepEqual(
      r.admitted.slice(0, 10).map((a) => a.atMs),
      [0, 50, 100, 150, 200, 250, 300, 350, 400, 450],
    );
  });

  test('edge-burst: fixed window admits 2 × the limit within one period straddling the edge; the others do not', async () => {
    const run = await runCli(['simulate', '--pattern', 'edge-burst', '--limit', '10', '--duration', '2s', '--out', path.join(tmp, 'edge.svg')]);
    assert.equal(run.code, 0, run.stderr);
    // 10 requests at 905, 915, …, 995 ms and 10 at 1005, …, 1095 ms.
    assert.deepEqual(parseSummary(run.stdout), {
      fixed_window: [20, 20, 20], // 10 in the window ending at 1 s, 10 in the next: 20 within 0.2 s
      sliding_window: [10, 20, 10], // at 1005 ms the estimate is 10 × 0.995 + 1 > 10, and so on to 1095 ms
      token_bucket: [11, 20, 11], // 10 tokens, and one refilled (1 per 100 ms) by 1005 ms
      gcra: [11, 20, 11], // T = 100 ms, τ = 1 s: the same conformance as the bucket
    });
    assertWellFormedSvg(fs.readFileSync(path.join(tmp, 'edge.svg'), 'utf8'));
    const fixed = simulate(parseSimulateArgs(['--pattern', 'edge-burst', '--duration', '2s']), 'fixed_window');
    const straddling = fixed.admitted.filter((a) => a.atMs >= 900 && a.atMs < 1100).length;
    assert.equal(straddling, 20);
  });

  test("two tenants: the noisy one never takes the quiet one's budget", async () => {
    const run = await runCli(['simulate', '--pattern', 'two-tenants', '--algorithm', 'gcra', '--duration', '3s']);
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stdout, /^gcra: admitted \d+\/105 \(quiet 15\/15, noisy \d+\/90\); max admitted by one key in any 1s: \d+$/m);
  });

  test('maxInAnyPeriod counts a half-open interval', () => {
    assert.equal(maxInAnyPeriod([0, 500, 999, 1000, 1999], 1000), 3);
    assert.equal(maxInAnyPeriod([], 1000), 0);
  });

  test('the charts in docs/algorithms/ are what the commands in docs/algorithms.md produce', async () => {
    const doc = fs.readFileSync(path.join(REPO, 'docs/algorithms.md'), 'utf8');
    const commands = [...doc.matchAll(/^npx sluice simulate (.+)$/gm)].map((m) => m[1].trim().split(/\s+/));
    const committed = fs
      .readdirSync(path.join(REPO, 'docs/algorithms'))
      .filter((f) => f.endsWith('.svg'))
      .sort();
    const produced: string[] = [];
    for (const args of commands) {
      const i = args.indexOf('--out');
      assert.ok(i >= 0 && args[i + 1].startsWith('docs/algorithms/'), args.join(' '));
      const name = path.basename(args[i + 1]);
      const out = path.join(tmp, name);
      const run = await runCli(['simulate', ...args.slice(0, i), '--out', out, ...args.slice(i + 2)]);
      assert.equal(run.code, 0, run.stderr);
      assert.equal(fs.readFileSync(out, 'utf8'), fs.readFileSync(path.join(REPO, 'docs/algorithms', name), 'utf8'), `${name} drifted: rerun its command`);
      assert.ok(doc.includes(`](algorithms/${name})`), `${name} is not embedded`);
      produced.push(name);
    }
    assert.deepEqual(produced.sort(), committed);
  });

  test('the sample output in docs/algorithms.md is what the command prints', async () => {
    const doc = fs.readFileSync(path.join(REPO, 'docs/algorithms.md'), 'utf8');
    const sample = /```text\n\$ npx sluice simulate (.+)\n([^`]+)```/.exec(doc);
    assert.ok(sample !== null);
    const run = await runCli(['simulate', ...sample[1].split(/\s+/)]);
    assert.equal(run.code, 0, run.stderr);
    assert.equal(run.stdout, sample[2]);
  });
});
