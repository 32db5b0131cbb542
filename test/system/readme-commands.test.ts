import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { closing, type Running, startApp } from '../support/app';
import { MAIN, REPO } from '../support/process';

// Every shell command in the README and docs/ (where the README's topics now live) is run here
// (against a real server, its port swapped for the test's) or needs what a test machine lacks, and
// is listed below with why. A new command in them that is neither fails this test, so the docs
// cannot drift from what works.

const NEEDS: [RegExp, string][] = [
  [/^docker /, 'Docker'],
  [/^kubectl /, 'a Kubernetes cluster'],
  [/localhost:(10000|9901|18080)\b/, 'the docker compose stack (Envoy in front of sluice)'],
  [/^grpcurl /, 'grpcurl: test/system/grpcurl.test.ts runs these where it is installed'],
  [/^npm ci && npm (start|test)$/, "the quick start itself: CI runs the README's install and test commands"],
  [/ --store redis /, 'a Redis of your own'],
  [/^npx sluice simulate /, 'test/system/simulate.test.ts runs these and compares their charts with docs/algorithms/'],
  [/^npm run build --silent && node --test dist\/test\/(unit\/[\w-]+|system)\/[\w-]+\.test\.js$/, 'one test file: the suite runs it'],
];

// The docs' commands: lines of their sh/bash blocks that start with a command, continuation lines
// (an open quote) joined, trailing comments dropped.
function readmeCommands(): string[] {
  const docs = fs.readdirSync(path.join(REPO, 'docs')).filter((f) => f.endsWith('.md'));
  const readme = ['README.md', ...docs.map((f) => `docs/${f}`)].map((f) => fs.readFileSync(path.join(REPO, f), 'utf8')).join('\n');
  const commands: string[] = [];
  for (const block of readme.matchAll(/```(?:sh|bash)\n([\s\S]*?)```/g)) {
    const lines = block[1].split('\n');
    for (let i = 0; i < lines.length; i++) {
      if (!/^(curl|npx|npm|node|docker|kubectl|grpcurl|redis-cli) /.test(lines[i])) continue;
      let command = lines[i];
      while ((command.match(/'/g) ?? []).length % 2 === 1 && i + 1 < lines.length) command += `\n${lines[++i]}`;
      commands.push(command.replace(/\s{2,}#.*$/, '').trim());
    }
  }
  return commands;
}

let app: Running;
before(async () => {
  app = await startApp({ configPaths: [path.join(REPO, 'examples/config')] });
});
after(() => app.stop());

// curl -s localhost:<port>/<path> -d '<json>' → the same POST to the test's server.
async function runCurl(command: string): Promise<void> {
  const m = /^curl -s localhost:(8080|6070)(\/\w+) -d '(.*)'$/s.exec(command);
  assert.ok(m, `a curl form this test does not know: ${command}`);
  const port = m[1] === '8080' ? app.httpPort : app.adminPort;
  const res = await fetch(`http://127.0.0.1:${port}${m[2]}`, closing({ method: 'POST', body: m[3] }));
  assert.equal(res.status, 200, `${command}: HTTP ${res.status}`);
  // /json answers as the RLS response does, /explain with its own `overall`.
  const body = (await res.json()) as { overallCode?: string; overall?: string };
  assert.equal(body.overallCode ?? body.overall, 'OK', command);
}

// npx sluice check <paths> → the built CLI, from the repository root, as npx runs it.
function runCheck(command: string): void {
  const args = command.replace(/^npx sluice /, '').split(/\s+/);
  const r = spawnSync(process.execPath, [MAIN, ...args], { cwd: REPO, encoding: 'utf8' });
  const bad = args.some((a) => a.includes('/bad/'));
  assert.equal(r.status, bad ? 1 : 0, `${command}: exit ${r.status}\n${r.stdout}${r.stderr}`);
}

test('every command of the README and docs/ is run here or says what it needs', async () => {
  const commands = readmeCommands();
  assert.ok(commands.length >= 10, `found only ${commands.length} commands: is the extraction broken?`);
  let ran = 0;
  for (const command of commands) {
    if (NEEDS.some(([re]) => re.test(command))) continue;
    if (command.startsWith('curl ')) await runCurl(command);
    else if (command.startsWith('npx sluice check ')) runCheck(command);
    else assert.fail(`command in README.md or docs/ neither run by this test nor listed with what it needs: ${command}`);
    ran++;
  }
  assert.ok(ran >= 4, `ran ${ran} commands`);
});
