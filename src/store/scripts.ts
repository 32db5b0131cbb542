import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

export const LUA_DIR = path.resolve(__dirname, '../../../lua');

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
  const hash = createHash('sha1').update(algorithms).update(NAMES.map((n) => bodies[n]).join('\0')).digest('hex').slice(0, 12);
  const libraryName = `sluice_${hash}`;
  const functions = Object.fromEntries(NAMES.map((name) => [name, `${libraryName}_${name}`])) as Record<ScriptName, string>;
  const library = [
    `#!lua name=${libraryName}`,
    algorithms,
    ...NAMES.map((name) => `local function ${name}_main(KEYS, ARGV)\n${bodies[name]}\nend\nredis.register_function('${functions[name]}', ${name}_main)`),
  ].join('\n');
  return { eval: evalScripts, library, libraryName, functions };
}
