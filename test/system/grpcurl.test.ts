import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { ManualClock } from '../../src/clock';
import { startApp } from '../support/app';
import { findGoTool } from '../support/go-tool';

// The README's "With grpcurl" commands, run with a real grpcurl against the example config; each
// command's output must be what the README shows under it (its `# ` lines).

const ROOT = path.resolve(__dirname, '../../..');
const GRPCURL_VERSION = 'v1.9.4';
const INSTALL = `go install github.com/fullstorydev/grpcurl/cmd/grpcurl@${GRPCURL_VERSION}`;
// 18 s into a 5-minute boundary, so the durations until reset are the README's 42 s and 582 s.
const NOW = 1_800_000_000_000 + 18_000;

interface Example {
  command: string;
  output: string;
}

function readmeExamples(): Example[] {
  const readme = readFileSync(path.join(ROOT, 'README.md'), 'utf8');
  const section = readme.slice(readme.indexOf('### With grpcurl\n'));
  const block = /```sh\n([\s\S]*?)```/.exec(section)?.[1];
  assert.ok(block, 'README has a sh block under "### With grpcurl"');
  return block
    .trim()
    .split(/\n\s*\n/)
    .map((chunk) => {
      const lines = chunk.split('\n');
      const command = lines.filter((l) => !l.startsWith('#')).join('\n');
      const output = lines
        .filter((l) => l.startsWith('#'))
        .map((l) => l.replace(/^# ?/, ''))
        .join('\n');
      return { command, output };
    });
}

test("the README's grpcurl commands print what the README shows", async (t) => {
  const grpcurl = findGoTool('grpcurl');
  if (!grpcurl) {
    t.skip(`grpcurl not installed: ${INSTALL}`);
    return;
  }
  const examples = readmeExamples();
  assert.deepEqual(
    examples.map((e) => e.command.split(/\s+/).slice(-1)[0]),
    ['list', 'envoy.service.ratelimit.v3.RateLimitRequest', 'envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit', 'grpc.health.v1.Health/Check'],
  );
  const s = await startApp({ configPaths: [path.join(ROOT, 'examples/config')] }, { clock: new ManualClock(NOW) });
  try {
    const env = { ...process.env, PATH: `${path.dirname(grpcurl)}${path.delimiter}${process.env.PATH ?? ''}` };
    for (const { command, output } of examples) {
      assert.ok(output, `the README shows the output of: ${command}`);
      const local = command.replaceAll('localhost:8081', `127.0.0.1:${s.grpcPort}`);
      const { stdout } = await promisify(execFile)('sh', ['-c', local], { env, timeout: 20_000 });
      assert.equal(stdout.trimEnd(), output, command);
    }
  } finally {
    await s.stop();
  }
});
