import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';

// `npm ci` on the machines sluice is built on (Node 20) installs without an engine warning: every
// package in package-lock.json, development ones too, accepts this Node. A newer major of a
// dependency that wants a newer Node is caught here, not by a user reading npm's warnings.

const ROOT = path.join(__dirname, '../../..', '..');

type Version = [number, number, number];

// One comparator of an npm engines range, in the forms the lock file holds: `*`, `>=14`,
// `>= 10.x`, `^18.19.0`, `6.*`, `4.x`. Anything else fails the test, so a new form is looked at.
function accepts(v: Version, comparator: string): boolean {
  if (comparator === '*' || comparator === 'x') return true;
  const m = /^(>=|<=|>|<|\^|~|=)?(\d+)(?:\.(\d+|x|\*))?(?:\.(\d+|x|\*))?$/.exec(comparator);
  if (m === null) throw new Error(`engines range part not understood: ${comparator}`);
  const [, op = '=', major, minor, patch] = m;
  const wild = (s: string | undefined) => s === undefined || s === 'x' || s === '*';
  const want: Version = [Number(major), wild(minor) ? 0 : Number(minor), wild(patch) ? 0 : Number(patch)];
  const cmp = v[0] - want[0] || v[1] - want[1] || v[2] - want[2];
  switch (op) {
    case '>=':
      return cmp >= 0;
    case '>':
      return cmp > 0;
    case '<=':
      return cmp <= 0;
    case '<':
      return cmp < 0;
    case '^':
      return cmp >= 0 && v[0] === want[0];
    case '~':
      return cmp >= 0 && v[0] === want[0] && v[1] === want[1];
    default:
      // A bare version: the parts it names must match.
      return v[0] === want[0] && (wild(minor) || v[1] === want[1]) && (wild(patch) || v[2] === want[2]);
  }
}

function satisfies(v: Version, range: string): boolean {
  return range.split('||').some((alternative) =>
    alternative
      .trim()
      .replace(/(>=|<=|>|<|\^|~|=)\s+/g, '$1')
      .split(/\s+/)
      .every((c) => accepts(v, c)),
  );
}

test('the engines range reader understands what it is given', () => {
  const v20: Version = [20, 20, 2];
  assert.equal(satisfies(v20, '>=22'), false);
  assert.equal(satisfies(v20, '>= 14.6'), true);
  assert.equal(satisfies(v20, '^16 || ^18 || >=20'), true);
  assert.equal(satisfies(v20, '^18.19.0 || >=20.6.0'), true);
  assert.equal(satisfies(v20, '^18.19.0 || >=20.21.0'), false);
  assert.equal(satisfies(v20, '6.* || 8.* || >= 10.*'), true);
  assert.equal(satisfies(v20, '4.x || >=6.0.0'), true);
  assert.equal(satisfies([4, 2, 0], '6.* || 8.*'), false);
  assert.throws(() => satisfies(v20, 'node20'), /not understood/);
});

test(`every locked package accepts this Node (${process.version})`, () => {
  const lock = JSON.parse(fs.readFileSync(path.join(ROOT, 'package-lock.json'), 'utf8')) as {
    packages: Record<string, { version?: string; engines?: unknown }>;
  };
  const v = process.versions.node.split('.').map(Number) as Version;
  const refused: string[] = [];
  for (const [where, pkg] of Object.entries(lock.packages)) {
    const engines = pkg.engines;
    if (engines === null || typeof engines !== 'object' || Array.isArray(engines)) continue;
    const node = (engines as Record<string, unknown>).node;
    if (typeof node === 'string' && !satisfies(v, node)) refused.push(`${where.replace(/^node_modules\//, '')}@${pkg.version} wants node ${node}`);
  }
  assert.deepEqual(refused, [], `npm ci would warn (EBADENGINE); pin versions that support Node ${process.versions.node}`);
});
