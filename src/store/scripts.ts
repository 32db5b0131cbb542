import fs from 'node:fs';
import path from 'node:path';

export const LUA_DIR = path.resolve(__dirname, '../../../lua');

function read(name: string): string {
  return fs.readFileSync(path.join(LUA_DIR, name), 'utf8');
}

// Each script is algorithms.lua followed by its own body, loaded once per connection and invoked
// by SHA (ioredis' defineCommand falls back to EVAL on NOSCRIPT, which also reloads it).
export function loadScripts(): { decide: string; refund: string; absorb: string; lease: string } {
  const algorithms = read('algorithms.lua');
  const withAlgorithms = (name: string) => `${algorithms}\n${read(name)}`;
  return { decide: withAlgorithms('decide.lua'), refund: withAlgorithms('refund.lua'), absorb: withAlgorithms('absorb.lua'), lease: withAlgorithms('lease.lua') };
}
