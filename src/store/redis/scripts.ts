import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { Cluster, Redis } from 'ioredis';
import type { StoreEvents } from '../events';
import { WireCommand } from '../resp';

export const LUA_DIR = path.resolve(__dirname, '../../../../lua');

export type RedisClient = Redis | Cluster;

export type ScriptName = 'decide' | 'refund' | 'absorb' | 'lease' | 'heartbeat' | 'restore' | 'restore_own' | 'credit' | 'reclaim';

const NAMES: readonly ScriptName[] = ['decide', 'refund', 'absorb', 'lease', 'heartbeat', 'restore', 'restore_own', 'credit', 'reclaim'];

function read(name: string): string {
  return fs.readFileSync(path.join(LUA_DIR, name), 'utf8');
}

export interface Scripts {
  // For EVALSHA/EVAL (servers without Functions): algorithms.lua, then the script body as a
  // function of (KEYS, ARGV), called at once. The library part runs on every call.
  eval: Record<ScriptName, string>;
  // For FUNCTION LOAD (Redis >= 7): one library holding every script as a function, so that
  // algorithms.lua runs once per load instead of once per call. The library and function names
  // carry a hash of the code: replicas of different versions (a rolling upgrade) each find their
  // own functions on the same Redis.
  library: string;
  libraryName: string;
  functions: Record<ScriptName, string>;
}

// Each script body is written as the body of a function of (KEYS, ARGV), so the same text serves
// both ways of loading it.
export function loadScripts(): Scripts {
  const algorithms = read('algorithms.lua');
  const bodies = Object.fromEntries(NAMES.map((name) => [name, read(`${name}.lua`)])) as Record<ScriptName, string>;
  const evalScripts = Object.fromEntries(
    NAMES.map((name) => [name, `${algorithms}\nlocal function main(KEYS, ARGV)\n${bodies[name]}\nend\nreturn main(KEYS, ARGV)\n`]),
  ) as Record<ScriptName, string>;
  const hash = createHash('sha1')
    .update(algorithms)
    .update(NAMES.map((n) => bodies[n]).join('\0'))
    .digest('hex')
    .slice(0, 12);
  const libraryName = `sluice_${hash}`;
  const functions = Object.fromEntries(NAMES.map((name) => [name, `${libraryName}_${name}`])) as Record<ScriptName, string>;
  const library = [
    `#!lua name=${libraryName}`,
    algorithms,
    ...NAMES.map((name) => `local function ${name}_main(KEYS, ARGV)\n${bodies[name]}\nend\nredis.register_function('${functions[name]}', ${name}_main)`),
  ].join('\n');
  return { eval: evalScripts, library, libraryName, functions };
}

export type Arg = string | number;
type Send = (...args: unknown[]) => Promise<unknown>;

// ioredis flattens array arguments into the command, so an argument list goes in as one array:
// spreading thousands of arguments into a call would overflow the stack.
function send(client: RedisClient, command: string, ...args: unknown[]): Promise<unknown> {
  return (client as unknown as Record<string, Send>)[command](...args);
}

const COMMAND: Record<ScriptName, string> = {
  decide: 'sluiceDecide',
  refund: 'sluiceRefund',
  absorb: 'sluiceAbsorb',
  lease: 'sluiceLease',
  heartbeat: 'sluiceHeartbeat',
  restore: 'sluiceRestore',
  restore_own: 'sluiceRestoreOwn',
  credit: 'sluiceCredit',
  reclaim: 'sluiceReclaim',
};

export interface ScriptRunnerOptions {
  // Round-robin over the ready ones (REDIS_POOL_SIZE); one Cluster client in cluster mode.
  clients: RedisClient[];
  cluster: boolean;
  events: StoreEvents;
}

// How a script call reaches Redis: over which connection, as FCALL of sluice's function library
// (loaded where it is missing) or, on servers without Functions, EVALSHA reloaded on NOSCRIPT;
// each call timed for the store-call metric.
export class ScriptRunner {
  readonly scripts: Scripts;
  private next = 0;
  // Functions (FCALL) until a server says it has none (Redis < 7); then EVALSHA for good.
  private functions = true;
  // Library loads in flight, per connection, so that a burst of "not found" loads it once.
  private readonly loading = new Map<RedisClient, Promise<void>>();

  constructor(private readonly o: ScriptRunnerOptions) {
    this.scripts = loadScripts();
    for (const client of o.clients) {
      for (const [name, lua] of Object.entries(this.scripts.eval)) client.defineCommand(COMMAND[name as ScriptName], { lua });
    }
  }

  // Whether calls go as FCALL (false once a server said it has no Functions).
  get usesFunctions(): boolean {
    return this.functions;
  }

  // Round-robin over the connections that are up: a pool member that is down (reconnecting) gets
  // no calls, instead of failing its share of them.
  client(): RedisClient {
    const clients = this.o.clients;
    for (let tried = 0; tried < clients.length; tried++) {
      this.next = (this.next + 1) % clients.length;
      if (clients[this.next].status === 'ready') return clients[this.next];
    }
    throw new Error('no Redis connection ready');
  }

  run(operation: string, script: ScriptName, numKeys: number, args: Arg[], client?: RedisClient): Promise<unknown> {
    return this.timed(operation, () => {
      const c = client ?? this.client();
      return this.call(c, script, () => send(c, 'fcall', this.scripts.functions[script], numKeys, args), numKeys, args);
    });
  }

  // As run(), for FCALL written as bytes on one Redis: `wire` (see store/resp.ts), and the same
  // call's arguments in case EVALSHA must take its place.
  runWire(operation: string, script: ScriptName, wire: Buffer, numKeys: number, args: Arg[]): Promise<unknown> {
    return this.timed(operation, () => {
      const c = this.client() as Redis;
      const fcall = (): Promise<unknown> => {
        const command = new WireCommand('fcall', wire);
        c.sendCommand(command);
        return command.promise;
      };
      return this.call(c, script, fcall, numKeys, args);
    });
  }

  async timed<T>(operation: string, fn: () => Promise<T>): Promise<T> {
    const start = performance.now();
    let ok = false;
    try {
      const result = await fn();
      ok = true;
      return result;
    } finally {
      this.o.events.storeCall(operation, (performance.now() - start) / 1000, ok);
    }
  }

  // FCALL of the script's function in sluice's library, loading the library where it is missing
  // (a new server, a restart without persistence, FUNCTION FLUSH, a new cluster node) and trying
  // once more. On a server without Functions (Redis < 7): EVALSHA from then on.
  // `fcall` sends the FCALL; `numKeys` and `args` are the same call's, for EVALSHA.
  private async call(client: RedisClient, script: ScriptName, fcall: () => Promise<unknown>, numKeys: number, args: Arg[]): Promise<unknown> {
    if (this.functions) {
      try {
        return await fcall();
      } catch (err) {
        const message = err instanceof Error ? err.message : '';
        if (/unknown command/i.test(message)) this.functions = false;
        else if (!/function not found/i.test(message)) throw err;
        else {
          await this.loadLibrary(client);
          if (this.functions) return fcall();
        }
      }
    }
    return this.evalsha(client, script, numKeys, args);
  }

  // FUNCTION LOAD of the library on this connection's server, or on every primary of a cluster
  // (the function is looked for on the node that owns the keys). A library already there is fine.
  private loadLibrary(client: RedisClient): Promise<void> {
    let pending = this.loading.get(client);
    if (pending === undefined) {
      const targets: Redis[] = this.o.cluster ? (client as Cluster).nodes('master') : [client as Redis];
      pending = Promise.all(
        targets.map((node) =>
          node.call('FUNCTION', 'LOAD', this.scripts.library).catch((err: unknown) => {
            const message = err instanceof Error ? err.message : String(err);
            if (/already exists/i.test(message)) return;
            if (/unknown command|unknown subcommand/i.test(message)) {
              this.functions = false;
              return;
            }
            throw err;
          }),
        ),
      )
        .then(() => undefined)
        .finally(() => this.loading.delete(client));
      this.loading.set(client, pending);
    }
    return pending;
  }

  // EVALSHA, reloading on NOSCRIPT. ioredis re-sends once, but a second flush (or failover) can
  // land between its reload and the retry; then EVAL with the whole script, which cannot miss.
  private async evalsha(client: RedisClient, script: ScriptName, numKeys: number, args: Arg[]): Promise<unknown> {
    try {
      return await send(client, COMMAND[script], numKeys, args);
    } catch (err) {
      if (!(err instanceof Error) || !err.message.includes('NOSCRIPT')) throw err;
      return send(client, 'eval', this.scripts.eval[script], numKeys, args);
    }
  }
}
