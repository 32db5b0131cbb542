import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import { ManualClock } from '../../../src/clock';
import {
  type RateLimitResponse,
  RateLimitResponse_Code as Code,
  RateLimitResponse_RateLimit_Unit as Unit,
} from '../../../src/gen/envoy/service/ratelimit/v3/rls';
import type { Settings } from '../../../src/settings';
import { d, startApp } from '../../support/app';

// Request sequences and the answers envoyproxy/ratelimit gives to them, derived from its own
// integration test (test/integration/integration_test.go, testBasicBaseConfig) and README
// examples. Each scenario runs twice: with COUNT_DENIED_HITS=true sluice must give upstream's
// answers exactly; without it (all-or-nothing) the answers may differ only where a denied request
// would have consumed budget, and the scenario says where.

const FILES: Record<string, string> = {
  'basic.yaml': `
domain: basic
descriptors:
  - key: key1
    rate_limit: { unit: second, requests_per_unit: 50 }
  - key: one_per_minute
    rate_limit: { unit: minute, requests_per_unit: 1 }
`,
  'another.yaml': `
domain: another
descriptors:
  - key: key2
    rate_limit: { unit: minute, requests_per_unit: 20 }
  - key: key3
    rate_limit: { unit: hour, requests_per_unit: 10 }
`,
  'example7.yaml': `
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit: { name: specific_limit, requests_per_unit: 5, unit: second }
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces: [{ name: specific_limit }]
          requests_per_unit: 10
          unit: second
`,
  'modes.yaml': `
domain: modes
descriptors:
  - key: shadowed
    shadow_mode: true
    rate_limit: { unit: minute, requests_per_unit: 2 }
  - key: quota
    quota_mode: true
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: quota_big
    quota_mode: true
    rate_limit: { unit: minute, requests_per_unit: 100 }
  - key: plain
    rate_limit: { unit: minute, requests_per_unit: 10 }
`,
};

type Expect = [code: Code, limit: number | undefined, unit: Unit | undefined, remaining: number];
interface Step {
  domain: string;
  descriptors: [string, string][][];
  hitsAddend?: number;
  overall: Code;
  statuses: Expect[];
}
const OK = Code.OK;
const OVER = Code.OVER_LIMIT;

function configDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-upstream-'));
  for (const [name, text] of Object.entries(FILES)) fs.writeFileSync(path.join(dir, name), text);
  return dir;
}

function actual(r: RateLimitResponse): { overall: Code; statuses: Expect[] } {
  return {
    overall: r.overallCode,
    statuses: r.statuses.map((s) => [s.code, s.currentLimit?.requestsPerUnit, s.currentLimit?.unit, s.limitRemaining]),
  };
}

async function run(steps: Step[], settings: Partial<Settings>): Promise<void> {
  const s = await startApp({ configPaths: [configDir()], ...settings }, { clock: new ManualClock(1_800_000_000_000) });
  try {
    for (const [i, step] of steps.entries()) {
      const response = await s.call({ domain: step.domain, descriptors: step.descriptors.map((e) => d(...e)), hitsAddend: step.hitsAddend ?? 0 });
      assert.deepEqual(actual(response), { overall: step.overall, statuses: step.statuses }, `step ${i}`);
    }
  } finally {
    await s.stop();
  }
}

// Builds both expectations of a scenario: `aon` rewrites upstream's step where they differ.
function scenario(name: string, upstream: Step[], aon: (step: Step, i: number) => Step = (s) => s): void {
  describe(name, () => {
    test('COUNT_DENIED_HITS=true gives upstream answers', () => run(upstream, { countDeniedHits: true }));
    test('all-or-nothing differs only where a denied request would consume', () => run(upstream.map(aon), {}));
  });
}

scenario('integration: unknown domain, then key1 50/s', [
  { domain: 'foo', descriptors: [[['hello', 'world']]], overall: OK, statuses: [[OK, undefined, undefined, 0]] },
  { domain: 'basic', descriptors: [[['key1', 'foo']]], overall: OK, statuses: [[OK, 50, Unit.SECOND, 49]] },
]);

scenario(
  'integration: 25 hits on a 20/min key',
  Array.from({ length: 25 }, (_, i) => ({
    domain: 'another',
    descriptors: [[['key2', 'r1']]],
    overall: i >= 20 ? OVER : OK,
    statuses: [[i >= 20 ? OVER : OK, 20, Unit.MINUTE, i >= 20 ? 0 : 20 - (i + 1)] as Expect],
  })),
);

// Upstream counts the 20/min key on every request, even those that key3 (10/hour) rejects; with
// all-or-nothing the rejected requests leave key2 at 10 remaining (as upstream's own
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT does in the same test).
scenario(
  'integration: two keys, one request',
  Array.from({ length: 15 }, (_, i) => ({
    domain: 'another',
    descriptors: [[['key2', 'r2']], [['key3', 'r2']]],
    overall: i >= 10 ? OVER : OK,
    statuses: [[OK, 20, Unit.MINUTE, 20 - (i + 1)] as Expect, [i >= 10 ? OVER : OK, 10, Unit.HOUR, i >= 10 ? 0 : 10 - (i + 1)] as Expect],
  })),
  (step, i) => (i >= 10 ? { ...step, statuses: [[OK, 20, Unit.MINUTE, 10], step.statuses[1]] } : step),
);

// README example 7: the replaced 5/s limit does not apply, the replacing 10/s one does.
scenario(
  'README example 7: replaces',
  Array.from({ length: 12 }, (_, i) => ({
    domain: 'example7',
    descriptors: [
      [
        ['key_1', 'value_1'],
        ['user', 'bkthomps'],
      ],
      [
        ['key_2', 'value_2'],
        ['user', 'bkthomps'],
      ],
    ],
    overall: i >= 10 ? OVER : OK,
    statuses: [[OK, undefined, undefined, 0] as Expect, [i >= 10 ? OVER : OK, 10, Unit.SECOND, i >= 10 ? 0 : 9 - i] as Expect],
  })),
);

// hits_addend 3 on a 10/min key: the 4th request (12 > 10) is rejected. Upstream has counted its
// hits, so the single hit after it is rejected too; all-or-nothing kept the count at 9.
scenario(
  'hits_addend: rejected hits count against the key upstream',
  [
    { domain: 'modes', descriptors: [[['plain', 'h']]], hitsAddend: 3, overall: OK, statuses: [[OK, 10, Unit.MINUTE, 7]] },
    { domain: 'modes', descriptors: [[['plain', 'h']]], hitsAddend: 3, overall: OK, statuses: [[OK, 10, Unit.MINUTE, 4]] },
    { domain: 'modes', descriptors: [[['plain', 'h']]], hitsAddend: 3, overall: OK, statuses: [[OK, 10, Unit.MINUTE, 1]] },
    { domain: 'modes', descriptors: [[['plain', 'h']]], hitsAddend: 3, overall: OVER, statuses: [[OVER, 10, Unit.MINUTE, 0]] },
    { domain: 'modes', descriptors: [[['plain', 'h']]], overall: OVER, statuses: [[OVER, 10, Unit.MINUTE, 0]] },
  ],
  (step, i) => (i === 4 ? { ...step, overall: OK, statuses: [[OK, 10, Unit.MINUTE, 0]] } : step),
);

// shadow_mode: past the limit the descriptor is still OK (remaining 0), and so is the request.
scenario(
  'shadow_mode rule',
  Array.from({ length: 4 }, (_, i) => ({
    domain: 'modes',
    descriptors: [[['shadowed', 's']]],
    overall: OK,
    statuses: [[OK, 2, Unit.MINUTE, i >= 2 ? 0 : 1 - i] as Expect],
  })),
);

// quota_mode: a failed quota descriptor fails the request only when every quota descriptor failed.
scenario('quota_mode rules', [
  {
    domain: 'modes',
    descriptors: [[['quota', 'q']], [['quota_big', 'q']]],
    overall: OK,
    statuses: [
      [OK, 1, Unit.MINUTE, 0],
      [OK, 100, Unit.MINUTE, 99],
    ],
  },
  {
    domain: 'modes',
    descriptors: [[['quota', 'q']], [['quota_big', 'q']]],
    overall: OK,
    statuses: [
      [OVER, 1, Unit.MINUTE, 0],
      [OK, 100, Unit.MINUTE, 98],
    ],
  },
  { domain: 'modes', descriptors: [[['quota', 'q']]], overall: OVER, statuses: [[OVER, 1, Unit.MINUTE, 0]] },
]);

describe('global SHADOW_MODE', () => {
  test('statuses keep OVER_LIMIT, the overall code is OK', () =>
    run(
      Array.from({ length: 3 }, (_, i) => ({
        domain: 'basic',
        descriptors: [[['one_per_minute', 'g']]],
        overall: OK,
        statuses: [[i >= 1 ? OVER : OK, 1, Unit.MINUTE, 0] as Expect],
      })),
      { globalShadowMode: true },
    ));
});
