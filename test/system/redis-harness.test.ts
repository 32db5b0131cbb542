import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { freePort, requireRedisBinaries, startCluster, startRedis, startSentinelSet, stopAll } from '../support/redis';

after(stopAll);

function isAlive(pid: number | undefined): boolean {
  try {
    process.kill(pid!, 0);
    return true;
  } catch {
    return false;
  }
}

test('finds redis-server and redis-cli', () => {
  const { server, cli } = requireRedisBinaries();
  assert.match(server, /redis-server$/);
  assert.match(cli, /redis-cli$/);
});

test('freePort never hands out the shared Redis port and keeps the cluster bus port free', async () => {
  const port = await freePort({ clusterBus: true });
  assert.notEqual(port, 6379);
  assert.ok(port + 10_000 <= 65_535);
  await assert.rejects(startRedis({ port: 6379 }), /refusing port 6379/);
});

test('standalone: SET/GET, then stop removes the process', async () => {
  const node = await startRedis();
  try {
    assert.notEqual(node.port, 6379);
    assert.equal(await node.cli('SET', 'k', 'v'), 'OK');
    assert.equal(await node.cli('GET', 'k'), 'v');
  } finally {
    await node.stop();
  }
  assert.equal(isAlive(node.process.pid), false);
});

test('standalone: stop with SIGTERM shuts down gracefully', async () => {
  const node = await startRedis();
  await node.stop('SIGTERM');
  assert.equal(node.process.exitCode, 0);
});

test('standalone: a paused server does not answer until resumed', async () => {
  const node = await startRedis();
  try {
    node.pause();
    const ping = node.cli('PING');
    const timedOut = Symbol('timeout');
    const first = await Promise.race([ping, new Promise((r) => setTimeout(() => r(timedOut), 300))]);
    assert.equal(first, timedOut);
    node.resume();
    assert.equal(await ping, 'PONG');
    assert.equal(await node.cli('PING'), 'PONG');
  } finally {
    await node.stop();
  }
});

test('standalone: a server that cannot start rejects with its log', async () => {
  await assert.rejects(startRedis({ args: ['--no-such-option', 'x'] }), /no-such-option/);
});

test('sentinel: reports the primary, replica is in sync', async () => {
  const set = await startSentinelSet();
  try {
    const addr = await set.sentinel.cli('SENTINEL', 'get-master-addr-by-name', set.masterName);
    assert.deepEqual(addr.split('\n'), ['127.0.0.1', String(set.primary.port)]);
    assert.equal(await set.primary.cli('SET', 'k', 'v'), 'OK');
    assert.match(await set.replica.cli('INFO', 'replication'), /master_link_status:up/);
  } finally {
    await set.stop();
  }
  for (const node of [set.primary, set.replica, set.sentinel]) assert.equal(isAlive(node.process.pid), false);
});

test('cluster: 3 masters, state ok, redirected SET/GET', async () => {
  const cluster = await startCluster();
  try {
    assert.equal(cluster.nodes.length, 6);
    const info = await cluster.nodes[0].cli('CLUSTER', 'INFO');
    assert.match(info, /cluster_state:ok/);
    assert.match(info, /cluster_size:3/);
    assert.equal((await cluster.primaries()).length, 3);
    assert.equal(await cluster.nodes[0].cli('-c', 'SET', 'foo', 'bar'), 'OK');
    assert.equal(await cluster.nodes[5].cli('-c', 'GET', 'foo'), 'bar');
  } finally {
    await cluster.stop();
  }
  for (const node of cluster.nodes) assert.equal(isAlive(node.process.pid), false);
});
