import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { ManualClock } from '../../../src/clock';
import { createLogger } from '../../../src/logger';
import { upstreamCounters } from '../../../src/telemetry/statsd';
import { d, startApp, type Running } from '../../support/app';
import { parseExposition, seriesOf } from '../../support/exposition';

// A call for a domain no config defines is answered OK with no limit, as upstream answers it, and
// is counted (upstream's domain_not_found) and logged at warn once per domain per minute, with
// bounded label cardinality and log memory whatever the callers send.

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-unknown-domain-'));
fs.writeFileSync(path.join(dir, 'edge.yaml'), 'domain: edge\ndescriptors:\n  - { key: tenant, rate_limit: { unit: minute, requests_per_unit: 100 } }\n');
after(() => fs.rmSync(dir, { recursive: true, force: true }));

interface Line {
  level: string;
  event?: string;
  domain?: string;
  calls?: number;
  msg: string;
}

async function start(): Promise<{ s: Running; clock: ManualClock; lines: Line[] }> {
  const lines: Line[] = [];
  const logger = createLogger('warn', { write: (text: string) => void lines.push(JSON.parse(text) as Line) });
  const clock = new ManualClock(Date.UTC(2026, 0, 1));
  const s = await startApp({ configPaths: [dir] }, { logger, clock });
  return { s, clock, lines };
}

const events = (lines: Line[], event: string) => lines.filter((l) => l.event === event);
const notFound = async (s: Running) => seriesOf(parseExposition(await (await s.http('/metrics')).text()), 'ratelimit_service_rate_limit_domain_not_found');

test("a misspelt domain: OK with no limit, counted per descriptor by upstream's statistic, logged once a minute", async () => {
  const { s, clock, lines } = await start();
  try {
    const two = [d(['tenant', 'a']), d(['tenant', 'b'])];
    for (let i = 0; i < 3; i++) {
      const answer = await s.call({ domain: 'egde', descriptors: two });
      assert.equal(answer.overallCode, 1); // OK
      assert.deepEqual(
        answer.statuses.map((x) => [x.code, x.currentLimit]),
        [
          [1, undefined],
          [1, undefined],
        ],
      );
    }
    await s.call({ domain: 'edge', descriptors: two });
    assert.deepEqual(await notFound(s), { 'domain=egde': 6 });
    const logged = events(lines, 'unknown_domain');
    assert.equal(logged.length, 1);
    assert.equal(logged[0].level, 'warn');
    assert.equal(logged[0].domain, 'egde');
    assert.match(logged[0].msg, /unknown domain 'egde'.*answered OK with no limit \(did you mean 'edge'\?\)/);

    clock.advance(59_000);
    await s.call({ domain: 'egde', descriptors: [d(['tenant', 'a'])] });
    assert.equal(events(lines, 'unknown_domain').length, 1, 'not again within the minute');
    clock.advance(1_000);
    await s.call({ domain: 'egde', descriptors: [d(['tenant', 'a'])] });
    assert.equal(events(lines, 'unknown_domain').length, 2, 'again a minute later');

    assert.deepEqual(await notFound(s), { 'domain=egde': 8 });
    const statsd = [...(await upstreamCounters(s.app.metrics))].filter(([name]) => name.endsWith('.domain_not_found'));
    assert.deepEqual(statsd, [['ratelimit.service.rate_limit.egde.domain_not_found', 8]]);
  } finally {
    await s.stop();
  }
});

test('many distinct domains: at most 100 series plus _other_, at most 100 lines a minute, then a count of the unlogged', async () => {
  const { s, clock, lines } = await start();
  try {
    for (let i = 0; i < 150; i++) await s.call({ domain: `d${i}`, descriptors: [d(['tenant', 'a'])] });
    await s.call({ domain: 'x'.repeat(200), descriptors: [d(['tenant', 'a'])] });
    const series = await notFound(s);
    assert.equal(Object.keys(series).length, 101);
    assert.equal(series['domain=d0'], 1);
    assert.equal(series['domain=d99'], 1);
    assert.equal(series['domain=d100'], undefined);
    assert.equal(series['domain=_other_'], 51);
    assert.equal(events(lines, 'unknown_domain').length, 100);
    assert.equal(events(lines, 'unknown_domain_unlogged').length, 0);

    clock.advance(60_000);
    await s.call({ domain: 'd150', descriptors: [d(['tenant', 'a'])] });
    assert.deepEqual(
      events(lines, 'unknown_domain_unlogged').map((l) => l.calls),
      [51],
    );
    assert.equal(events(lines, 'unknown_domain').at(-1)?.domain, 'd150');
    assert.equal(series['domain=_other_'] + 1, (await notFound(s))['domain=_other_']);
  } finally {
    await s.stop();
  }
});
