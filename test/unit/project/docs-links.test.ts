import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { REPO } from '../../support/process';

// The README is the front door and docs/ holds the rest by topic (issue 35). Text moves between
// pages, so a link that pointed at a section of the README can silently point at nothing: every
// relative link of README.md and docs/*.md must name a file (or folder) that exists and, when it
// has an anchor, a heading of that file.

const README_MAX_LINES = 400;

function pages(): string[] {
  const docs = fs.readdirSync(path.join(REPO, 'docs')).filter((f) => f.endsWith('.md'));
  return ['README.md', ...docs.sort().map((f) => `docs/${f}`)];
}

// Lines outside fenced code blocks, with inline code spans removed (a `[x](y)` in code is no link).
function prose(text: string): { line: string; n: number }[] {
  const out: { line: string; n: number }[] = [];
  let fenced = false;
  text.split('\n').forEach((line, i) => {
    if (line.startsWith('```')) fenced = !fenced;
    else if (!fenced) out.push({ line: line.replace(/`[^`]*`/g, '``'), n: i + 1 });
  });
  return out;
}

// GitHub's heading anchors: lower case, punctuation other than - and _ dropped, spaces as -,
// a repeated heading numbered -1, -2, ...
function anchors(text: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  let fenced = false;
  for (const line of text.split('\n')) {
    if (line.startsWith('```')) fenced = !fenced;
    const m = fenced ? null : /^#{1,6} (.*)$/.exec(line);
    if (!m) continue;
    const slug = m[1]
      .trim()
      .toLowerCase()
      .replace(/[^\p{L}\p{N}_\- ]/gu, '')
      .replace(/ /g, '-');
    const count = seen.get(slug);
    out.add(count === undefined ? slug : `${slug}-${count + 1}`);
    seen.set(slug, (count ?? -1) + 1);
  }
  return out;
}

function links(page: string): { target: string; where: string }[] {
  const text = fs.readFileSync(path.join(REPO, page), 'utf8');
  const out: { target: string; where: string }[] = [];
  for (const { line, n } of prose(text)) {
    for (const m of line.matchAll(/\]\(([^)\s]+)\)/g)) out.push({ target: m[1], where: `${page}:${n}` });
  }
  return out;
}

test('every relative link in README.md and docs/*.md points to an existing file and heading', () => {
  const broken: string[] = [];
  let checked = 0;
  for (const page of pages()) {
    for (const { target, where } of links(page)) {
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // https:, mailto:
      checked++;
      const [file, anchor] = target.split('#');
      const resolved = file === '' ? page : path.join(path.dirname(page), decodeURIComponent(file));
      const abs = path.join(REPO, resolved);
      if (!abs.startsWith(REPO + path.sep) || !fs.existsSync(abs)) {
        broken.push(`${where}: ${target} (no file ${resolved})`);
        continue;
      }
      if (anchor !== undefined && resolved.endsWith('.md') && !anchors(fs.readFileSync(abs, 'utf8')).has(anchor)) {
        broken.push(`${where}: ${target} (no heading #${anchor} in ${resolved})`);
      }
    }
  }
  assert.deepEqual(broken, []);
  assert.ok(checked >= 50, `only ${checked} relative links found: is the extraction broken?`);
});

test(`README.md stays at most ${README_MAX_LINES} lines and links every page of docs/`, () => {
  const readme = fs.readFileSync(path.join(REPO, 'README.md'), 'utf8');
  const lines = readme.split('\n').length - (readme.endsWith('\n') ? 1 : 0);
  assert.ok(lines <= README_MAX_LINES, `README.md has ${lines} lines; move text to a page of docs/`);
  const linked = new Set(links('README.md').map(({ target }) => target.split('#')[0]));
  const unlinked = pages().filter((p) => p.startsWith('docs/') && !linked.has(p));
  assert.deepEqual(unlinked, [], 'pages of docs/ missing from the README\'s "Documentation" list');
});
