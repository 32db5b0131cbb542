import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { parseDuration } from '../../src/config/duration';
import { SETTINGS } from '../../src/settings';
import { REPO } from '../support/process';

// The deadline figures the docs give are the settings' defaults (issue 34, item 9): docs/istio.md
// and envoy/envoy.yaml said "10 ms" long after STORE_DEADLINE's default had become 100 ms.

const DOC_DIRS = ['docs', 'envoy', 'deploy'];

function docFiles(dir: string): string[] {
  const out: string[] = [];
  for (const e of fs.readdirSync(path.join(REPO, dir), { withFileTypes: true })) {
    const rel = path.join(dir, e.name);
    if (e.isDirectory()) out.push(...docFiles(rel));
    else if (/\.(md|ya?ml)$/.test(e.name)) out.push(rel);
  }
  return out;
}

function defaultMs(env: string): number {
  const spec = SETTINGS.find((s) => s.env.includes(env));
  assert.ok(spec && spec.kind === 'duration', env);
  return spec.def as number;
}

// A figure stated for a deadline: `STORE_DEADLINE` (100 ms), STORE_DEADLINE=100ms, "the store
// deadline (100 ms)", "sluice's own Redis deadline of 100 ms". A value set on purpose
// (`--store-deadline 1s` in a benchmark's command) is not a statement of the default.
const FIGURES: [RegExp, string][] = [
  [/`?STORE_DEADLINE`?\s*(?:\(|=)\s*(\d+)\s*(ms|s)\b/g, 'STORE_DEADLINE'],
  [/\b(?:store|Redis) deadline\s*(?:\(|of\s+|=\s*)(\d+)\s*(ms|s)\b/gi, 'STORE_DEADLINE'],
  [/`?DEADLINE_MARGIN`?\s*(?:\(|=)\s*(\d+)\s*(ms|s)\b/g, 'DEADLINE_MARGIN'],
];

test('every deadline figure in the README, docs/, envoy/ and deploy/ is the default of its setting', () => {
  const files = ['README.md', ...DOC_DIRS.flatMap(docFiles)];
  let seen = 0;
  const wrong: string[] = [];
  for (const file of files) {
    const lines = fs.readFileSync(path.join(REPO, file), 'utf8').split('\n');
    lines.forEach((line, i) => {
      for (const [re, env] of FIGURES) {
        for (const m of line.matchAll(re)) {
          seen++;
          if (parseDuration(`${m[1]}${m[2]}`) !== defaultMs(env)) wrong.push(`${file}:${i + 1}: "${m[0]}", but ${env} defaults to ${defaultMs(env)} ms`);
        }
      }
    });
  }
  assert.deepEqual(wrong, []);
  assert.ok(seen >= 3, `the README states the deadline defaults (${seen} figures found)`);
});
