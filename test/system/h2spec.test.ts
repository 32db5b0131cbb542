import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import type { Settings } from '../../src/settings';
import { startApp } from '../support/app';
import { findGoTool } from '../support/go-tool';

// h2spec (RFC 7540/9113 and RFC 7541 conformance) against the gRPC port, plain h2c: sluice's own
// HTTP/2 (the default server) must fail only the cases listed in test/h2spec-expected-failures.json,
// each with why it is harmless or who is fixing it, and must pass at least as many cases as the
// same gRPC layer on node:http2 (nghttp2), the bar DESIGN.md sets, measured in the same run.

const ROOT = path.resolve(__dirname, '../../..');
const INSTALL = 'go install github.com/summerwind/h2spec/cmd/h2spec@v2.2.1+incompatible';
// Cases that wait for something that does not come (a frame the server rightly never sends) take
// the whole timeout; 2 s leaves a slow CI machine room without making each run much longer.
const TIMEOUT_SECONDS = 2;

interface Expected {
  minPassed: number;
  failures: { id: string; description: string; why: string }[];
}

type Outcome = 'passed' | 'failed' | 'skipped';

interface Case {
  // The suite's package and the case's 1-based position in it, e.g. "http2/5.1/5": what h2spec
  // prints as "5.1. Stream States / 5:" and takes as an argument to run that case alone.
  id: string;
  description: string;
  outcome: Outcome;
}

const ENTITIES: Record<string, string> = { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'" };

function unescapeXml(s: string): string {
  return s.replace(/&(#x[0-9a-f]+|#[0-9]+|\w+);/gi, (whole, e: string) => {
    if (e[0] !== '#') return ENTITIES[e] ?? whole;
    return String.fromCodePoint(e[1] === 'x' || e[1] === 'X' ? parseInt(e.slice(2), 16) : parseInt(e.slice(1), 10));
  });
}

function attributes(tag: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [, name, value] of tag.matchAll(/([\w:-]+)="([^"]*)"/g)) out[name] = unescapeXml(value);
  return out;
}

// h2spec's JUnit report: <testsuite package="http2/5.1" tests="13"> holding <testcase
// classname="description">, empty when passed, with <skipped/> or <error>/<failure> otherwise.
function parseJUnit(xml: string): Case[] {
  const cases: Case[] = [];
  for (const [, suiteTag, body] of xml.matchAll(/<testsuite\b([^>]*)>([\s\S]*?)<\/testsuite>/g)) {
    const suite = attributes(suiteTag);
    const before = cases.length;
    for (const [, caseTag, , content = ''] of body.matchAll(/<testcase\b([^>]*?)(\/>|>([\s\S]*?)<\/testcase>)/g)) {
      const outcome: Outcome = /<skipped\b/.test(content) ? 'skipped' : /<(error|failure)\b/.test(content) ? 'failed' : 'passed';
      cases.push({ id: `${suite.package}/${cases.length - before + 1}`, description: attributes(caseTag).classname, outcome });
    }
    // A parser that missed a case would shift every later id in the suite.
    assert.equal(cases.length - before, Number(suite.tests), `testcases read in suite ${suite.package}`);
  }
  return cases;
}

interface Run {
  cases: Case[];
  count(outcome: Outcome): number;
}

async function runH2spec(h2spec: string, grpcServerImpl: Settings['grpcServerImpl'], dir: string): Promise<Run> {
  const app = await startApp({ configPaths: [path.join(ROOT, 'examples/config')], grpcServerImpl });
  const report = path.join(dir, `${grpcServerImpl}.xml`);
  try {
    const stdout = await new Promise<string>((resolve, reject) => {
      // h2spec exits 1 when a case fails; only a run without a report is an error here.
      execFile(
        h2spec,
        ['-h', '127.0.0.1', '-p', String(app.grpcPort), '-j', report, '-o', String(TIMEOUT_SECONDS)],
        { timeout: 120_000, maxBuffer: 1 << 24 },
        (err, out, stderr) => {
          if (err && typeof err.code !== 'number') reject(new Error(`h2spec did not run: ${err.message}\n${stderr}`));
          else resolve(out);
        },
      );
    });
    const cases = parseJUnit(readFileSync(report, 'utf8'));
    const count = (outcome: Outcome) => cases.filter((c) => c.outcome === outcome).length;
    // Its own summary, e.g. "145 tests, 127 passed, 5 skipped, 13 failed": the parser agrees.
    const summary = /(\d+) tests, (\d+) passed, (\d+) skipped, (\d+) failed/.exec(stdout);
    assert.ok(summary, `h2spec printed its summary line:\n${stdout.slice(-2000)}`);
    assert.deepEqual([cases.length, count('passed'), count('skipped'), count('failed')], summary.slice(1).map(Number), `report vs summary (${grpcServerImpl})`);
    return { cases, count };
  } finally {
    await app.stop();
  }
}

const list = (cases: { id: string; description: string }[]) => cases.map((c) => `  ${c.id}: ${c.description}`).join('\n');

test("h2spec: sluice's HTTP/2 fails only the listed cases, and passes at least as many as node:http2", async (t) => {
  const h2spec = findGoTool('h2spec');
  assert.ok(h2spec, `h2spec is not installed (looked on PATH, in GOBIN and in GOPATH/bin); install it with: ${INSTALL}`);
  const expectedFile = path.join(ROOT, 'test/h2spec-expected-failures.json');
  const expected = JSON.parse(readFileSync(expectedFile, 'utf8')) as Expected;
  const dir = mkdtempSync(path.join(tmpdir(), 'sluice-h2spec-'));
  try {
    // Both at once: most of a run is h2spec waiting out timeouts, so the pair takes as long as one.
    const [sluice, node] = await Promise.all([runH2spec(h2spec, 'sluice', dir), runH2spec(h2spec, 'http2', dir)]);
    const byId = new Map(sluice.cases.map((c) => [c.id, c]));

    await t.test('every listed case exists in this h2spec (ids are stable)', () => {
      const unknown = expected.failures.filter((f) => byId.get(f.id)?.description !== f.description);
      assert.deepEqual(unknown, [], `listed in ${expectedFile} but not in h2spec's report under that id and description`);
    });

    await t.test('no case fails that is not listed (a regression)', () => {
      const listed = new Set(expected.failures.map((f) => f.id));
      const regressions = sluice.cases.filter((c) => c.outcome === 'failed' && !listed.has(c.id));
      assert.deepEqual(regressions, [], `h2spec cases failing that are not in ${expectedFile}:\n${list(regressions)}`);
    });

    await t.test('no listed case passes (the list is not stale)', () => {
      // A skipped case proves nothing either way: it stays listed.
      const fixed = expected.failures.filter((f) => byId.get(f.id)?.outcome === 'passed');
      assert.deepEqual(fixed, [], `these listed h2spec cases pass now; remove them from ${expectedFile} (and raise minPassed):\n${list(fixed)}`);
    });

    await t.test(`at least minPassed (${expected.minPassed}) cases pass`, () => {
      assert.ok(
        sluice.count('passed') >= expected.minPassed,
        `${sluice.count('passed')} passed, ${sluice.count('skipped')} skipped, below the floor ${expected.minPassed}`,
      );
    });

    await t.test('at least as many pass as on node:http2', () => {
      const nodePassed = new Set(node.cases.filter((c) => c.outcome === 'passed').map((c) => c.id));
      const behind = sluice.cases.filter((c) => c.outcome !== 'passed' && nodePassed.has(c.id));
      assert.ok(
        sluice.count('passed') >= node.count('passed'),
        `sluice passes ${sluice.count('passed')} h2spec cases, node:http2 ${node.count('passed')}; node:http2 passes these that sluice does not:\n${list(behind)}`,
      );
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
