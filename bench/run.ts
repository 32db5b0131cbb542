import os from 'node:os';
import { fleetBench } from './fleet';
import { grpcBench, type GrpcRow } from './grpc-load';
import { capBench, memoryPerKey, microBench } from './micro';
import { redisMemory } from './redis-memory';

// `npm run bench`: prints the machine, then each figure with its ratio to a baseline measured in
// the same run. Nothing here asserts: these machines are shared and noisy.
async function main(): Promise<void> {
  const cpus = os.cpus();
  console.log(`machine: ${cpus.length} x ${cpus[0]?.model ?? 'unknown cpu'}, ${Math.round(os.totalmem() / 2 ** 30)} GiB, node ${process.version}`);
  const fmt = (n: number) => Math.round(n).toLocaleString('en-US');
  for (const keys of [1, 100_000]) {
    console.log(`\nin-process decisions, ${fmt(keys)} distinct key(s):`);
    for (const r of microBench(keys)) console.log(`  ${r.name.padEnd(28)} ${fmt(r.opsPerSec).padStart(12)} ops/s   ${r.ratio.toFixed(3)} x baseline`);
  }
  console.log('\nmemory store heap per counter (200,000 counters):');
  for (const r of memoryPerKey()) console.log(`  ${r.algorithm.padEnd(16)} ${fmt(r.bytesPerKey)} bytes`);
  console.log('\nmemory store at its key cap (MEMORY_MAX_KEYS 1,000,000; 200,000 new keys per phase):');
  for (const r of capBench()) console.log(`  ${r.name.padEnd(36)} ${fmt(r.opsPerSec).padStart(12)} new keys/s, slowest ${r.worstMs.toFixed(1)} ms   ${fmt(r.size)} exact counters, approximate tier ${fmt(r.overflowBytes)} bytes`);
  console.log('\nRedis bytes per counter (20,000 counters; key like the sample):');
  const redis = await redisMemory();
  if (typeof redis === 'string') console.log(`  ${redis}`);
  else {
    console.log(`  sample key: ${redis[0].sampleKey}`);
    for (const r of redis) console.log(`  ${r.algorithm.padEnd(16)} MEMORY USAGE ${fmt(r.memoryUsage)} bytes, used_memory growth ${fmt(r.usedMemoryPerKey)} bytes/key`);
  }
  const requests = Number(process.env.BENCH_REQUESTS ?? 100_000);
  console.log(`\ngRPC over loopback, h2load -c 4 -m 32, ${fmt(requests)} requests each:`);
  const grpc = await grpcBench(requests);
  if (typeof grpc === 'string') {
    console.log(`  ${grpc}`);
    return;
  }
  const table = (label: string, rows: GrpcRow[]) => {
    console.log(`  ${label}:`);
    for (const r of rows) console.log(`    ${r.name.padEnd(44)} ${fmt(r.reqPerSec).padStart(9)} req/s   ${r.ratio.toFixed(3)} x baseline`);
  };
  table('memory store', grpc.memory);
  if (typeof grpc.redis === 'string') console.log(`  Redis store: ${grpc.redis}`);
  else {
    table('Redis store (one Lua script per request, no leases, every answer a Redis decision)', grpc.redis);
    const redis = grpc.redis;
    console.log('  Redis store / memory store, same run:');
    grpc.memory.slice(1).forEach((m, i) => console.log(`    ${m.name.padEnd(44)} ${(redis[i + 1].reqPerSec / m.reqPerSec).toFixed(3)}`));
  }
  const fleet = await fleetBench(requests);
  console.log('\n2 replicas on one Redis, default settings (automatic leases), one h2load per replica at once:');
  if (typeof fleet === 'string') console.log(`  ${fleet}`);
  else {
    const memory = grpc.memory.find((r) => r.name.startsWith('ShouldRateLimit fixed_window'));
    console.log(`  ${fleet.command}`);
    console.log(`  per replica ${fleet.perReplica.map(fmt).join(' + ')} = ${fmt(fleet.total)} req/s` + (memory ? `, ${(fleet.total / memory.reqPerSec).toFixed(3)} x the memory store's single process` : ''));
    console.log(`  degraded answers ${fleet.degraded}, breaker transitions ${fleet.breakerTransitions}, hits served from leases ${fleet.leaseServed}, failed or non-2xx ${fleet.failedOrNot2xx}`);
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
