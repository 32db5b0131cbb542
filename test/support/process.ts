import { type ChildProcess, spawn } from 'node:child_process';
import path from 'node:path';
import readline from 'node:readline';

export const MAIN = path.resolve(__dirname, '../../src/main.js');
export const REPO = path.resolve(__dirname, '../../..');

export interface ServerProcess {
  child: ChildProcess;
  grpcPort: number;
  httpPort: number;
  adminPort: number;
  // Every JSON log line the process printed so far, parsed.
  logs: Record<string, unknown>[];
  waitForLog(predicate: (line: Record<string, unknown>) => boolean, timeoutMs?: number): Promise<Record<string, unknown>>;
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

// The warm-up calls of a test's service: the default's 8192 take 0.7-1 s of each of the suite's
// hundreds of starts; 32 still runs the whole path once. test/system/first-call.test.ts and
// the bench (spawnShipped) get the default.
export const TEST_WARM_UP_CALLS = 32;

// Runs the real CLI (`node dist/src/main.js serve ...`) and waits for its "listening" log line,
// which carries the ports it bound.
// `nodeArgs`: flags for node itself (V8's among them), before the script.
// `main`: another build's dist/src/main.js (the peer bench's baseline).
export async function spawnServer(args: string[], env: NodeJS.ProcessEnv = {}, nodeArgs: string[] = [], main = MAIN): Promise<ServerProcess> {
  const child = spawn(
    process.execPath,
    [...nodeArgs, main, 'serve', '--grpc-port', '0', '--http-port', '0', '--admin-port', '0', '--host', '127.0.0.1', '--grpc-host', '127.0.0.1', ...args],
    {
      cwd: REPO,
      // SLUICE_GRPC_SERVER_IMPL=http2 or grpc-js runs the gRPC tests against that server.
      env: { PATH: process.env.PATH, GRPC_SERVER_IMPL: process.env.SLUICE_GRPC_SERVER_IMPL, WARM_UP_CALLS: String(TEST_WARM_UP_CALLS), ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  const logs: Record<string, unknown>[] = [];
  const waiters: { predicate: (l: Record<string, unknown>) => boolean; resolve: (l: Record<string, unknown>) => void }[] = [];
  let stderr = '';
  child.stderr?.on('data', (c: Buffer) => (stderr += c.toString()));
  readline.createInterface({ input: child.stdout! }).on('line', (line) => {
    let parsed: Record<string, unknown>;
    try {
      parsed = JSON.parse(line) as Record<string, unknown>;
    } catch {
      return;
    }
    logs.push(parsed);
    for (const w of [...waiters]) {
      if (w.predicate(parsed)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(parsed);
      }
    }
  });
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const waitForLog = (predicate: (l: Record<string, unknown>) => boolean, timeoutMs = 10_000) => {
    const seen = logs.find(predicate);
    if (seen) return Promise.resolve(seen);
    return new Promise<Record<string, unknown>>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no such log line within ${timeoutMs} ms; stderr: ${stderr}`)), timeoutMs);
      waiters.push({ predicate, resolve: (l) => (clearTimeout(timer), resolve(l)) });
      exited.then((code) => reject(new Error(`server exited with ${code}; stderr: ${stderr}`)));
    });
  };
  let listening: Record<string, unknown>;
  try {
    listening = await waitForLog((l) => l.event === 'listening');
  } catch (err) {
    // A process that never said it listens is not left running (it would keep the test alive).
    if (child.exitCode === null) child.kill('SIGKILL');
    throw err;
  }
  return {
    child,
    grpcPort: listening.grpcPort as number,
    httpPort: listening.httpPort as number,
    adminPort: listening.adminPort as number,
    logs,
    waitForLog,
    async stop(signal: NodeJS.Signals = 'SIGTERM') {
      if (child.exitCode === null) child.kill(signal);
      return exited;
    },
  };
}

// Several servers at once; when one fails to start, those that did are stopped before the error.
// The service as shipped, with its default warm-up (the bench's servers).
export function spawnShipped(args: string[], env: NodeJS.ProcessEnv = {}, nodeArgs: string[] = [], main = MAIN): Promise<ServerProcess> {
  return spawnServer(args, { WARM_UP_CALLS: undefined, ...env }, nodeArgs, main);
}

export async function spawnServers(starts: (() => Promise<ServerProcess>)[]): Promise<ServerProcess[]> {
  const settled = await Promise.allSettled(starts.map((start) => start()));
  const failed = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
  if (failed === undefined) return settled.map((s) => (s as PromiseFulfilledResult<ServerProcess>).value);
  await Promise.all(settled.map((s) => (s.status === 'fulfilled' ? s.value.stop() : undefined)));
  throw failed.reason;
}

// Runs the CLI to completion (e.g. `sluice check`).
export function runCli(args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [MAIN, ...args], { cwd: REPO, env: { PATH: process.env.PATH, ...env } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.on('exit', (code) => resolve({ code, stdout, stderr }));
  });
}
