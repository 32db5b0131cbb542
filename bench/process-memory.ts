import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { type ChildProcess, spawn } from 'node:child_process';
import readline from 'node:readline';
import { MAIN, REPO } from '../test/support/process';
import { startRedis } from '../test/support/redis';

// Resident memory of a running sluice (`BENCH_SECTIONS=process-memory npm run bench`): the real
// CLI on Redis, idle after it is ready, read from /proc (RSS and its anonymous part, which is what
// a container's memory limit mostly charges). Per worker: WORKERS=1, 2, 4 with a one-rule config
// (the primary of WORKERS > 1 apart). Per config size: WORKERS=1 with 1,000, 10,000 and 100,000
// descriptors; what grows is the compiled config, held once by each serving process (and by the
// primary, which loads it).

export interface ProcessMemory {
  pid: number;
  role: 'single' | 'primary' | 'worker';
  rssBytes: number;
  anonBytes: number;
}

export interface MemoryRow {
  workers: number;
  descriptors: number;
  configBytes: number;
  processes: ProcessMemory[];
}

function statusOf(pid: number): { rss: number; anon: number } {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? 0) * 1024;
  return { rss: kb('VmRSS'), anon: kb('RssAnon') };
}

export function childrenOf(pid: number): number[] {
  const text = fs.readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim();
  return text === '' ? [] : text.split(/\s+/).map(Number);
}

// One domain with `count` descriptors (`key: k`, value `v<i>`, a limit each), as a large
// upstream config looks.
export function configOf(count: number): string {
  const rows = ['domain: mem', 'descriptors:'];
  for (let i = 0; i < count; i++) rows.push(`  - key: k\n    value: v${i}\n    rate_limit: { unit: minute, requests_per_unit: ${100 + (i % 900)} }`);
  return `${rows.join('\n')}\n`;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// The CLI, until its "listening" line (a 100,000-descriptor config takes a while to compile).
function start(args: string[]): Promise<{ child: ChildProcess; httpPort: number }> {
  const child = spawn(
    process.execPath,
    [MAIN, 'serve', '--grpc-port', '0', '--http-port', '0', '--admin-port', '0', '--host', '127.0.0.1', '--grpc-host', '127.0.0.1', ...args],
    { cwd: REPO, env: { PATH: process.env.PATH }, stdio: ['ignore', 'pipe', 'inherit'] },
  );
  return new Promise((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`sluice exited with ${code}`)));
    readline.createInterface({ input: child.stdout! }).on('line', (line) => {
      if (!line.includes('"listening"')) return;
      const parsed = JSON.parse(line) as { event?: string; httpPort?: number };
      if (parsed.event === 'listening') resolve({ child, httpPort: parsed.httpPort! });
    });
  });
}

function stop(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null) return resolve();
    child.removeAllListeners('exit');
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
  });
}

async function measure(redisPort: number, workers: number, descriptors: number): Promise<MemoryRow> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-mem-'));
  const text = configOf(descriptors);
  fs.writeFileSync(path.join(dir, 'mem.yaml'), text);
  const server = await start([
    '--config',
    dir,
    '--store',
    'redis',
    '--redis-url',
    `127.0.0.1:${redisPort}`,
    '--workers',
    String(workers),
    '--config-max-file-bytes',
    String(64 << 20),
    '--config-max-descriptors',
    String(descriptors + 10),
  ]);
  try {
    for (const until = Date.now() + 60_000; (await fetch(`http://127.0.0.1:${server.httpPort}/healthcheck`)).status !== 200; await sleep(50)) {
      if (Date.now() > until) throw new Error('not ready within 60 s');
    }
    // Idle: start-up garbage collected, as a pod between bursts.
    await sleep(3000);
    const pid = server.child.pid!;
    const kids = workers > 1 ? childrenOf(pid) : [];
    const processes: ProcessMemory[] = [pid, ...kids].map((p, i) => {
      const s = statusOf(p);
      return { pid: p, role: workers === 1 ? 'single' : i === 0 ? 'primary' : 'worker', rssBytes: s.rss, anonBytes: s.anon };
    });
    return { workers, descriptors, configBytes: Buffer.byteLength(text), processes };
  } finally {
    await stop(server.child);
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

export async function processMemory(): Promise<MemoryRow[] | string> {
  let redis: Awaited<ReturnType<typeof startRedis>>;
  try {
    redis = await startRedis();
  } catch (err) {
    return `skipped: ${(err as Error).message}`;
  }
  const rows: MemoryRow[] = [];
  try {
    for (const workers of [1, 2, 4]) rows.push(await measure(redis.port, workers, 1));
    for (const descriptors of [1000, 10_000, 100_000]) rows.push(await measure(redis.port, 1, descriptors));
  } finally {
    await redis.stop();
  }
  return rows;
}

export function processMemoryTable(rows: MemoryRow[]): string[] {
  const mb = (n: number) => (n / 1e6).toFixed(1);
  const lines = ['  WORKERS  descriptors  config bytes   process   RSS MB  anonymous MB'];
  for (const r of rows) {
    for (const p of r.processes)
      lines.push(
        `  ${String(r.workers).padStart(7)}  ${String(r.descriptors).padStart(11)}  ${String(r.configBytes).padStart(12)}   ${p.role.padEnd(8)} ${mb(p.rssBytes).padStart(7)}  ${mb(p.anonBytes).padStart(12)}`,
      );
  }
  const base = rows.find((r) => r.workers === 1 && r.descriptors === 1);
  const big = rows.filter((r) => r.workers === 1 && r.descriptors >= 1000);
  if (base !== undefined) {
    for (const r of big) {
      const per1k = (r.processes[0].anonBytes - base.processes[0].anonBytes) / (r.descriptors / 1000) / 1e6;
      lines.push(`  ${r.descriptors} descriptors: ${per1k.toFixed(2)} MB anonymous per 1,000 descriptors over the one-rule config`);
    }
  }
  return lines;
}
