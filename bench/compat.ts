import { spawn } from 'node:child_process';
import path from 'node:path';

const SCRIPT = path.resolve(__dirname, '../../scripts/upstream-integration.sh');

// envoyproxy/ratelimit's own integration tests against sluice (scripts/upstream-integration.sh):
// its per-test lines and summary, or why it could not run (no Go, no Redis, the clone refused).
// Minutes long and it needs GitHub, so it is a report here rather than a CI test.
export function upstreamIntegration(): Promise<{ lines: string[]; code: number | null }> {
  return new Promise((resolve) => {
    // dist/ is built already by `npm run bench`.
    const child = spawn('bash', [SCRIPT], { env: { ...process.env, SLUICE_SKIP_BUILD: '1' }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (out += c.toString()));
    child.on('error', (err) => resolve({ lines: [`could not run ${SCRIPT}: ${err.message}`], code: null }));
    child.on('close', (code) => resolve({ lines: out.split('\n').filter((l) => l.trim() !== ''), code }));
  });
}
