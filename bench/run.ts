import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { attacksBench, attacksTable } from './attacks';
import { decisionsChart } from './chart';
import { upstreamIntegration } from './compat';
import { connectionsBench, connectionsScale, connectionsTable, setupTable } from './connections';
import { type DecisionRow, decisionsBench } from './decisions';
import { envoyInFrontBench } from './envoy-in-front';
import { envoyInFrontTable, envoyScale } from './envoy-in-front-table';
import { firstCallBench, firstCallTable } from './first-call';
import { fleetBench } from './fleet';
import { grpcImplBench, grpcImplTable } from './grpc-impl';
import { capBench, memoryPerKey, microBench } from './micro';
import { processMemory, processMemoryTable } from './process-memory';
import { baselineLines, peerBench, peerChart, peerRounds, peerTable } from './peer';
import { KEY_BYTES, redisMemory } from './redis-memory';
import { idleLine, idleRoundTrips } from './idle-wake';
import { regionsBench, regionsChart, regionsScale, regionsTable } from './regions';
import { tracingBench } from './tracing';

const CHART = path.resolve(__dirname, '../../docs/performance.svg');
const PEER_CHART = path.resolve(__dirname, '../../docs/peer.svg');
const REGIONS_CHART = path.resolve(__dirname, '../../docs/multi-region.svg');

// Only the sections named in BENCH_SECTIONS (comma-separated: micro, memory, process-memory, redis-memory,
// decisions, fleet, peer, regions, wake, tracing, connections, first-call, envoy-in-front, grpc-impl,
// attacks, compat) run; all by default.
function wanted(section: string): boolean {
  const only = process.env.BENCH_SECTIONS;
  return (
    only === undefined ||
    only
      .split(',')
      .map((s) => s.trim())
      .includes(section)
  );
}

// `npm run bench`: prints the machine, then each figure with its ratio to a baseline measured in
// the same run. Nothing here asserts: these machines are shared and noisy.
async function main(): Promise<void> {
  const cpus = os.cpus();
  console.log(`machine: ${cpus.length} x ${cpus[0]?.model ?? 'unknown cpu'}, ${Math.round(os.totalmem() / 2 ** 30)} GiB, node ${process.version}`);
  const machine = `${cpus.length} x ${cpus[0]?.model ?? 'unknown cpu'}`;
  const fmt = (n: number) => Math.round(n).toLocaleString('en-US');
  if (wanted('micro')) {
    for (const keys of [1, 100_000]) {
      console.log(`\nin-process decisions, ${fmt(keys)} distinct key(s):`);
      for (const r of microBench(keys)) console.log(`  ${r.name.padEnd(28)} ${fmt(r.opsPerSec).padStart(12)} ops/s   ${r.ratio.toFixed(3)} x baseline`);
    }
  }
  if (wanted('memory')) {
    console.log('\nmemory store heap per counter (200,000 counters):');
    for (const r of memoryPerKey()) console.log(`  ${r.algorithm.padEnd(16)} ${fmt(r.bytesPerKey)} bytes`);
    console.log('\nmemory store at its key cap (MEMORY_MAX_KEYS 1,000,000; 200,000 new keys per phase):');
    for (const r of capBench())
      console.log(
        `  ${r.name.padEnd(36)} ${fmt(r.opsPerSec).padStart(12)} new keys/s, slowest ${r.worstMs.toFixed(1)} ms   ${fmt(r.size)} exact counters, approximate tier ${fmt(r.overflowBytes)} bytes`,
      );
  }
  if (wanted('process-memory')) {
    console.log('\nsluice processes at rest on Redis, from /proc (bench/process-memory.ts):');
    const rows = await processMemory();
    console.log(typeof rows === 'string' ? `  ${rows}` : processMemoryTable(rows).join('\n'));
  }
  if (wanted('redis-memory')) {
    console.log(`\nRedis bytes per counter (20,000 counters; ${KEY_BYTES}-byte keys like the sample):`);
    const redis = await redisMemory();
    if (typeof redis === 'string') console.log(`  ${redis}`);
    else {
      console.log(`  sample key: ${redis[0].sampleKey}`);
      for (const r of redis)
        console.log(`  ${r.layout.padEnd(20)} MEMORY USAGE ${fmt(r.memoryUsage)} bytes, used_memory growth ${fmt(r.usedMemoryPerKey)} bytes/key`);
    }
  }
  const requests = Number(process.env.BENCH_REQUESTS ?? 100_000);
  if (wanted('decisions')) {
    console.log(
      `\nDecisions over gRPC, ${fmt(requests)} requests a row (100,000-key rows: ${fmt(requests / 2)}), 4 connections x 32 streams, grpc-timeout 1S:`,
    );
    const d = await decisionsBench(requests);
    if (typeof d === 'string') console.log(`  ${d}`);
    else {
      for (const c of d.commands) console.log(`  ${c}`);
      console.log('');
      console.log(decisionsTable(d.rows, d.minimalScriptUs));
      console.log(`\n  minimal script (INCRBY + PEXPIRE, redis-benchmark -c 16 -P 16): ${d.minimalScriptUs.toFixed(2)} us of Redis CPU per call`);
      console.log(
        `  decide script alone, 3 fixed-window limits a call (redis-benchmark -c 4 -P 32): ${d.decideScriptUs.hot.toFixed(2)} us of Redis CPU per call on the same keys, ${d.decideScriptUs.fresh.toFixed(2)} us on keys new to Redis`,
      );
      const h = d.halfRate;
      console.log(`  paced at half the Redis store's maximum (fixed window, 1 descriptor, hot key; h2load --rps, 4 connections x 1 stream):`);
      console.log(
        `    Redis store ${fmt(h.redis.reqPerSec)}/s, p50 ${h.redis.p50Ms.toFixed(2)} ms, p99 ${h.redis.p99Ms.toFixed(2)} ms; empty handler at the same rate: p50 ${h.empty.p50Ms.toFixed(2)} ms, p99 ${h.empty.p99Ms.toFixed(2)} ms`,
      );
      console.log(`  degraded answers (Redis rows): ${d.degraded}`);
      fs.writeFileSync(CHART, decisionsChart(d.rows, `${machine}, node ${process.version}; npm run bench, ${new Date().toISOString().slice(0, 10)}`));
      console.log(`  chart: ${path.relative(process.cwd(), CHART)}`);
    }
  }
  if (wanted('fleet')) {
    const fleet = await fleetBench(requests);
    console.log('\n2 replicas on one Redis, default settings (automatic leases), one h2load per replica at once:');
    if (typeof fleet === 'string') console.log(`  ${fleet}`);
    else {
      console.log(`  ${fleet.command}`);
      console.log(`  per replica ${fleet.perReplica.map(fmt).join(' + ')} = ${fmt(fleet.total)} req/s`);
      console.log(
        `  degraded answers ${fleet.degraded}, breaker transitions ${fleet.breakerTransitions}, hits served from leases ${fleet.leaseServed}, failed or non-2xx ${fleet.failedOrNot2xx}`,
      );
    }
  }
  if (wanted('peer')) {
    console.log(
      `\nBeside envoyproxy/ratelimit (Go), same redis-server, YAML and requests; ${fmt(requests)} requests a row, best of ${peerRounds()} alternating rounds, 4 connections x 32 streams, grpc-timeout 1S:`,
    );
    const p = await peerBench(requests);
    if (typeof p === 'string') console.log(`  ${p}`);
    else {
      console.log(`  upstream: ${p.install}`);
      console.log(`  ${p.pinning}`);
      for (const c of p.commands) console.log(`  ${c}`);
      console.log('');
      console.log(peerTable(p.rows));
      if (p.floor !== undefined) {
        const f = p.floor;
        console.log(
          `\n  Redis' floor at 3 descriptors x 100,000 keys: a function taking decide's arguments that only reads and creates the counters where sluice keeps them (window-hash fields: HMGET, HSET), in calls of ${f.batchRequests.toFixed(1)} requests (sluice's), costs Redis ${f.redisCpuUsPerDescriptor.toFixed(2)} µs/descriptor (${f.redisRatio.toFixed(2)}× upstream)`,
        );
      }
      const h = p.halfRate.map((r) => `${r.server} ${fmt(r.reqPerSec)}/s, p50 ${r.p50Ms.toFixed(2)} ms, p99 ${r.p99Ms.toFixed(2)} ms`);
      console.log(`\n  paced at half upstream's best rate (1 descriptor, hot key; h2load --rps, 16 connections x 1 stream): ${h.join('; ')}`);
      if (p.baseline !== undefined) {
        // A comparison run: docs/peer.svg shows this build alone, so it is left as it is.
        console.log(`\n  this build against BENCH_PEER_BASELINE=${p.baseline.dir} (${p.baseline.label}), same rounds:`);
        for (const line of baselineLines(p.rows, p.baseline)) console.log(`    ${line}`);
      } else {
        fs.writeFileSync(
          PEER_CHART,
          peerChart(
            p.rows,
            `${machine}, node ${process.version}; ${p.pinning.startsWith('unpinned') ? 'unpinned' : 'each service on core 1, Redis and h2load on core 0'}; BENCH_SECTIONS=peer npm run bench, ${new Date().toISOString().slice(0, 10)}`,
          ),
        );
        console.log(`  chart: ${path.relative(process.cwd(), PEER_CHART)}`);
      }
    }
  }
  if (wanted('tracing')) {
    const n = Math.min(requests, 100_000);
    console.log(
      `\nTracing off vs on (every call sampled, OTLP/http to a local sink), memory store, 1 descriptor, hot key; ${fmt(n)} requests a row, best of 2 alternating rounds, 4 connections x 32 streams:`,
    );
    const t = await tracingBench(n);
    if (typeof t === 'string') console.log(`  ${t}`);
    else {
      console.log(`  ${t.command}`);
      for (const r of t.rows)
        console.log(
          `  tracing ${r.tracing.padEnd(4)} ${fmt(r.reqPerSec).padStart(8)} decisions/s   ${r.serverCpuUsPerReq.toFixed(1).padStart(6)} us CPU/request`,
        );
      const [off, on] = t.rows;
      console.log(
        `  on/off: ${(on.reqPerSec / off.reqPerSec).toFixed(3)} x decisions/s, ${(on.serverCpuUsPerReq / off.serverCpuUsPerReq).toFixed(3)} x CPU per request; spans received ${fmt(t.spans)} of ${fmt(t.expectedSpans)} (2 per call)`,
      );
    }
  }
  if (wanted('connections')) {
    const { scale, seconds } = connectionsScale();
    console.log(
      `\nMany connections x 1 req/s each (500, 1,000, 4,000 scaled x${scale}; ${seconds} s a row), 1 stream each, grpc-timeout 1S, 3 descriptors, one Redis, every answer from Redis; h2load split into 10 processes 0.1 s apart:`,
    );
    const c = await connectionsBench();
    if (typeof c === 'string') console.log(`  ${c}`);
    else {
      for (const n of c.notes) console.log(`  ${n}`);
      console.log(`  ${c.command} (x10)`);
      console.log('');
      console.log(connectionsTable(c.rows));
      if (c.setup.length > 0) {
        console.log('\nCPU a new connection costs (pinned rows; the same requests on 4 connections, then each on a new one):\n');
        console.log(setupTable(c.setup));
      }
    }
  }
  if (wanted('first-call')) {
    console.log(
      '\nFirst decision on a new connection (bench/first-call.ts): servers started 5 times, 40 new connections after each, one ShouldRateLimit each (3 descriptors, grpc-timeout 20m), one Redis:',
    );
    const f = await firstCallBench();
    for (const n of f.notes) console.log(`  ${n}`);
    console.log(firstCallTable(f.rows));
  }
  if (wanted('envoy-in-front')) await envoyInFrontSection();
  if (wanted('grpc-impl')) {
    console.log(
      `\nsluice on grpc-js vs its own gRPC server on node:http2 and on its own HTTP/2 (GRPC_SERVER_IMPL), same Redis and requests; ${fmt(requests)} requests a row, best of 2 alternating rounds:`,
    );
    const g = await grpcImplBench(requests);
    if (typeof g === 'string') console.log(`  ${g}`);
    else {
      console.log(`  ${g.pinning}`);
      for (const c of g.commands) console.log(`  ${c}`);
      console.log('');
      console.log(grpcImplTable(g.rows));
      console.log('');
      console.log(connectionsTable(g.fleet));
      console.log(`\n  degraded answers: ${g.degraded}`);
      for (const p of g.profiles) console.log(`  profile ${p}`);
    }
  }
  if (wanted('attacks')) {
    console.log(
      '\nOne attacker connection against each gRPC server (issue 33; test/support/h2-attacks.ts), a legitimate grpc-js client calling one call after another on its own connection (1 s deadline), a new server process per row; times from the first abusive frame (handshake: from connecting; idle: from the last answer), floods stop after 3 s:',
    );
    console.log('');
    console.log(attacksTable(await attacksBench()));
  }
  if (wanted('wake') && !wanted('regions')) {
    console.log('\nOne Redis script round trip from Node, back to back and after idle gaps (bench/idle-wake.ts; also printed by the regions section):');
    console.log(`  ${idleLine(await idleRoundTrips())}`);
  }
  if (wanted('regions')) {
    const scale = regionsScale();
    const command = `BENCH_SECTIONS=regions ${scale === 1 ? '' : `REGIONS_BENCH_SCALE=${scale} `}npm run bench`;
    console.log(
      `\nMulti-region: 2 regions x 2 replicas, each on its own Redis, global Redis 40 ms away (one way); one tenant at 1000/min, offered 2x (70% a / 30% b); warm-up 5 s (token bucket: +60 s, its burst spent) not measured; phases scaled x${scale}:`,
    );
    console.log(`  ${command}`);
    const r = await regionsBench(scale);
    console.log(regionsTable(r));
    console.log(`  this machine, one Redis script round trip from Node (bench/idle-wake.ts): ${idleLine(await idleRoundTrips())}`);
    // Only a full-scale run is the figure the docs show.
    if (scale === 1) {
      fs.writeFileSync(REGIONS_CHART, regionsChart(r, `${machine}, node ${process.version}; ${command}, ${new Date().toISOString().slice(0, 10)}`));
      console.log(`  chart: ${path.relative(process.cwd(), REGIONS_CHART)}`);
    }
  }
  if (wanted('compat')) {
    console.log(
      "\nCompatibility report: envoyproxy/ratelimit's integration tests at f2fb157 against sluice, COMPAT_MODE=upstream (scripts/upstream-integration.sh; docs/migrating.md):",
    );
    const r = await upstreamIntegration();
    for (const line of r.lines) console.log(`  ${line}`);
    if (r.code !== 0) console.log(`  (the script exited ${r.code}: see its lines above)`);
  }
}

async function envoyInFrontSection(): Promise<void> {
  let scale: ReturnType<typeof envoyScale>;
  try {
    scale = envoyScale();
  } catch (err) {
    console.error(`\nenvoy-in-front: ${(err as Error).message}`);
    process.exitCode = 2;
    return;
  }
  const knobs = `${scale.scale === 1 ? '' : `BENCH_ENVOY_SCALE=${scale.scale} `}${scale.burner ? '' : 'BENCH_ENVOY_BURNER=0 '}${scale.workers === 'auto' ? '' : `BENCH_ENVOY_WORKERS=${scale.workers} `}${scale.warmS === 20 ? '' : `BENCH_ENVOY_WARM_S=${scale.warmS} `}${scale.coldStarts === 1 ? '' : `BENCH_ENVOY_COLD_STARTS=${scale.coldStarts} `}${scale.warmUpCalls === undefined ? '' : `BENCH_ENVOY_WARM_UP_CALLS=${scale.warmUpCalls} `}`;
  console.log(
    `\nEnvoy in front (bench/envoy-in-front.ts): envoy/envoy.yaml, addresses rewritten only, in front of 2 sluice replicas on one Redis, then of 2 envoyproxy/ratelimit replicas on another; Envoy's own counters (cluster.upstream.ratelimit.*, admin /stats) per row:`,
  );
  console.log(`  BENCH_SECTIONS=envoy-in-front ${knobs}npm run bench`);
  const r = await envoyInFrontBench(scale);
  if (typeof r === 'string') return console.log(`  ${r}`);
  for (const c of r.commands) console.log(`  ${c}`);
  if (typeof r.upstream === 'string') console.log(`  upstream column left out: ${r.upstream}`);
  console.log('');
  console.log(envoyInFrontTable(scale, r.sluice, r.upstream));
}

// The README's table: one row per measurement, ratios to the empty handler of the same requests.
function decisionsTable(rows: readonly DecisionRow[], minimalUs: number): string {
  const fmt = (n: number) => Math.round(n).toLocaleString('en-US');
  const lines = [
    '| server | algorithm | descriptors | keys | decisions/s | × empty handler | p50 ms | p99 ms | server CPU µs/req | Redis CPU µs/req (× minimal script) |',
    '|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const r of rows) {
    const redis = r.redisCpuUsPerReq === undefined ? '' : `${r.redisCpuUsPerReq.toFixed(1)} (${(r.redisCpuUsPerReq / minimalUs).toFixed(2)}×)`;
    const keys = r.keys === 1 ? '1 (h2load)' : `${fmt(r.keys)} (keys-load)`;
    lines.push(
      `| ${r.target} | ${r.target === 'empty handler' ? '–' : r.algorithm} | ${r.descriptors} | ${keys} | ${fmt(r.reqPerSec)} | ${r.ratio.toFixed(2)} | ${r.p50Ms.toFixed(1)} | ${r.p99Ms.toFixed(1)} | ${r.serverCpuUsPerReq.toFixed(0)} | ${redis} |`,
    );
  }
  return lines.join('\n');
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
