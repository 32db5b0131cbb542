import fs from 'node:fs';
import path from 'node:path';

export const LUA_DIR = path.resolve(__dirname, '../../../lua');

export type ScriptName = 'decide' | 'refund' | 'absorb' | 'lease' | 'heartbeat' | 'restore';

const NAMES: readonly ScriptName[] = ['decide', 'refund', 'absorb', 'lease', 'heartbeat', 'restore'];

function read(name: string): string {
  return fs.readFileSync(path.join(LUA_DIR, name), 'utf8');
}

// Each script is algorithms.lua followed by its own body, loaded once per connection and invoked
// by SHA (ioredis' defineCommand falls back to EVAL on NOSCRIPT, which also reloads it).
export function loadScripts(): Record<ScriptName, string> {
  const algorithms = read('algorithms.lua');
  return Object.fromEntries(NAMES.map((name) => [name, `${algorithms}\n${read(`${name}.lua`)}`])) as Record<ScriptName, string>;
}
