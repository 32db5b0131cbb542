import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
// The drivers live in test/support, as the other benches' servers and clients do: the suite
// (test/system/h2-attacks.test.ts) asserts on the very runs this section prints, so there is one copy.
import {
  ATTACK_CONFIG,
  type AttackResult,
  extraStreams,
  FLOODS,
  HALF_PREFACE,
  idleConnection,
  oneShortBodies,
  rapidReset,
  stalledHandshake,
} from '../test/support/h2-attacks';
import { type ServerProcess, spawnShipped } from '../test/support/process';
import { type Outcome, underAttack } from '../test/support/under-attack';
import { PREFACE } from '../src/server/h2grpc/wire';
import { percentile } from './fleet';

// Issue 33's attack classes against each GRPC_SERVER_IMPL: how soon the attacker is cut off and
// told what, what the server's memory does, and how a legitimate client on another connection
// fares meanwhile. A new server process per class and server, so that one class' memory or
// damage does not show in the next. Every driver stops by itself (FLOOD_MS at most).

export const IMPLS = ['sluice', 'http2', 'grpc-js'] as const;
type Impl = (typeof IMPLS)[number];

// GRPC_HANDSHAKE_TIMEOUT and GRPC_MAX_CONNECTION_IDLE for every server here, so that those
// classes end within the run.
const TIMEOUT_MS = 300;
const WAIT_MS = TIMEOUT_MS + 1_500;
const MAX_STREAMS = 1024;

interface AttackClass {
  name: string;
  run: (port: number) => Promise<AttackResult>;
  // false: the attacker never reads, so it cannot see a GOAWAY.
  reads?: boolean;
  // What the class measures beyond the close, for the notes column.
  note?: (o: Outcome) => string;
}

const CLASSES: AttackClass[] = [
  ...FLOODS.map((f) => ({ name: f.name.replace(/ \(CVE-[^)]*\)/, ''), run: f.run, reads: f.reads })),
  { name: 'class 4: Rapid Reset', run: rapidReset, note: (o) => `${o.attackerDecisions} of ${o.attack.detail.opened} reset calls decided` },
  {
    name: `class 5: ${MAX_STREAMS} + 50 streams left open`,
    run: (port) => extraStreams(port, MAX_STREAMS, 50),
    note: (o) => `announced limit ${o.attack.detail.announcedLimit < 0 ? 'none' : o.attack.detail.announcedLimit}, ${o.attack.detail.refused} refused`,
  },
  {
    name: 'class 5: 1 MiB bodies one byte short',
    run: (port) => oneShortBodies(port),
    note: (o) => `credit ${(o.attack.detail.connectionCredit / 2 ** 20).toFixed(1)} MiB`,
  },
  { name: 'class 5: handshake, nothing sent', run: (port) => stalledHandshake(port, Buffer.alloc(0), WAIT_MS) },
  { name: 'class 5: handshake, half the preface', run: (port) => stalledHandshake(port, HALF_PREFACE, WAIT_MS) },
  { name: 'class 5: handshake, preface but no SETTINGS', run: (port) => stalledHandshake(port, PREFACE, WAIT_MS) },
  { name: 'class 5: idle connection', run: (port) => idleConnection(port, WAIT_MS) },
];

export interface AttackRow {
  attack: string;
  reads: boolean;
  impl: Impl;
  outcome: Outcome | undefined;
  // The server process exited during the run (its code or signal), or could not be run.
  crashed?: string;
  note: string;
}

export async function attacksBench(): Promise<AttackRow[]> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-attacks-bench-'));
  fs.writeFileSync(path.join(dir, 'attacks.yaml'), ATTACK_CONFIG);
  const rows: AttackRow[] = [];
  try {
    for (const c of CLASSES) {
      for (const impl of IMPLS) rows.push(await runClass(dir, c, impl));
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
  return rows;
}

async function runClass(dir: string, c: AttackClass, impl: Impl): Promise<AttackRow> {
  const env = { GRPC_HANDSHAKE_TIMEOUT: `${TIMEOUT_MS}ms`, GRPC_MAX_CONNECTION_IDLE: `${TIMEOUT_MS}ms` };
  let server: ServerProcess | undefined;
  try {
    server = await spawnShipped(['--config', dir, '--grpc-server-impl', impl], env);
    const s = server;
    const outcome = await underAttack({ pid: s.child.pid!, grpcPort: s.grpcPort, httpPort: s.httpPort }, () => c.run(s.grpcPort));
    const crashed = s.child.exitCode !== null || s.child.signalCode !== null ? `exited (${s.child.exitCode ?? s.child.signalCode})` : undefined;
    return { attack: c.name, reads: c.reads !== false, impl, outcome, crashed, note: c.note?.(outcome) ?? '' };
  } catch (err) {
    const crashed =
      server !== undefined && server.child.exitCode !== null
        ? `exited (${server.child.exitCode})`
        : `failed: ${err instanceof Error ? err.message.split('\n')[0] : String(err)}`;
    return { attack: c.name, reads: c.reads !== false, impl, outcome: undefined, crashed, note: '' };
  } finally {
    await server?.stop('SIGKILL');
  }
}

export function attacksTable(rows: readonly AttackRow[]): string {
  const lines = [
    '| class | impl | attacker closed after (ms) | GOAWAY code | server peak RSS MB | legit answered % | legit p99 ms | notes |',
    '|---|---|---|---|---|---|---|---|',
  ];
  for (const r of rows) {
    const o = r.outcome;
    if (o === undefined) {
      lines.push(`| ${r.attack} | ${r.impl} | | | | | | ${r.crashed} |`);
      continue;
    }
    const a = o.attack;
    const calls = o.legit.answered + o.legit.failed;
    const goaway = a.goawayCode !== undefined ? `0x${a.goawayCode.toString(16)}` : r.reads ? 'none' : 'not read';
    const notes = [r.note, r.crashed === undefined ? '' : `server ${r.crashed}`].filter((n) => n !== '').join('; ');
    lines.push(
      `| ${r.attack} | ${r.impl} | ${a.closedAfterMs ?? 'never'} | ${goaway} | ${Math.round(o.peakRssMb)} | ${calls === 0 ? '–' : (100 * o.legit.share).toFixed(1)} (${calls} calls) | ${percentile(o.legit.latenciesMs, 99).toFixed(1)} | ${notes} |`,
    );
  }
  return lines.join('\n');
}
