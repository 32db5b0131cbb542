import { type ChildProcess, spawn } from 'node:child_process';
import http from 'node:http';

// The client side of the "Envoy in front" scenario (bench/envoy-in-front.ts): plain HTTP/1.1
// requests to Envoy's listener, one tenant header each, as a platform team's clients would send.

export interface Answer {
  // 0: no HTTP answer at all (connection refused or reset).
  status: number;
  headers: http.IncomingHttpHeaders;
}

export class EnvoyClient {
  // Keep-alive, no socket cap: a burst of n requests opens n connections to Envoy.
  private readonly agent = new http.Agent({ keepAlive: true });

  constructor(private readonly port: number) {}

  get(tenant: string): Promise<Answer> {
    return new Promise((resolve) => {
      const req = http.get({ host: '127.0.0.1', port: this.port, path: '/', agent: this.agent, headers: { 'x-tenant-id': tenant } }, (res) => {
        res.resume();
        res.once('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers }));
        res.once('error', () => resolve({ status: 0, headers: {} }));
      });
      req.once('error', () => resolve({ status: 0, headers: {} }));
    });
  }

  // All at once: one request per tenant given.
  burst(tenants: readonly string[]): Promise<Answer[]> {
    return Promise.all(tenants.map((t) => this.get(t)));
  }

  // `count` requests spread evenly at `perSecond`, tenant(i) for the i-th; resolves with every answer.
  async paced(count: number, perSecond: number, tenant: (i: number) => string): Promise<Answer[]> {
    const pending: Promise<Answer>[] = [];
    const start = performance.now();
    while (pending.length < count) {
      const due = Math.min(count, Math.floor(((performance.now() - start) * perSecond) / 1000) + 1);
      while (pending.length < due) pending.push(this.get(tenant(pending.length)));
      await new Promise((r) => setTimeout(r, 5));
    }
    return Promise.all(pending);
  }

  close(): void {
    this.agent.destroy();
  }
}

export function statusCount(answers: readonly Answer[], pred: (status: number) => boolean): number {
  return answers.filter((a) => pred(a.status)).length;
}

// Spins, and exits once its parent is gone: a bench killed midway leaves no core burning.
const BURN = 'const p = process.ppid; for (;;) { const t = Date.now() + 100; while (Date.now() < t); if (process.ppid !== p) process.exit(); }';

// "Other work" on the machine: one process spinning on a core until stopped.
export function startCpuBurner(): { stop(): Promise<void> } {
  const child: ChildProcess = spawn(process.execPath, ['-e', BURN], { stdio: 'ignore' });
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  return {
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    },
  };
}
