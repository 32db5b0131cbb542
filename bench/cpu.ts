import fs from 'node:fs';
import type { RedisNode } from '../test/support/redis';

// The clock ticks /proc counts CPU time in (sysconf(_SC_CLK_TCK), 100 on Linux).
const CLK_TCK = 100;

// CPU seconds a process used so far (user + system), from /proc.
export function processCpuSeconds(pid: number): number {
  const fields = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(fields[11]) + Number(fields[12])) / CLK_TCK;
}

// CPU seconds a Redis server used so far (INFO cpu, user + system).
export async function redisCpuSeconds(node: RedisNode): Promise<number> {
  const info = await node.cli('INFO', 'cpu');
  return [...info.matchAll(/used_cpu_(?:user|sys):([\d.]+)/g)].reduce((a, m) => a + Number(m[1]), 0);
}
