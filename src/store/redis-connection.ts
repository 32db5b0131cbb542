import fs from 'node:fs';
import type { ConnectionOptions } from 'node:tls';
import { Cluster, type ClusterOptions, Redis, type RedisOptions } from 'ioredis';
import type { Logger } from '../logger';
import type { Settings } from '../settings';
import type { RedisClient } from './redis';

interface HostPort {
  host: string;
  port: number;
}

function hostPort(text: string, defaultPort: number): HostPort {
  const t = text.trim();
  const m = /^\[?([^\]]*?)\]?(?::(\d+))?$/.exec(t);
  if (m === null || m[1] === '') throw new Error(`REDIS_URL: '${text}' is not host:port`);
  return { host: m[1], port: m[2] === undefined ? defaultPort : Number(m[2]) };
}

function auth(value: string): { username?: string; password?: string } {
  if (value === '') return {};
  const colon = value.indexOf(':');
  return colon < 0 ? { password: value } : { username: value.slice(0, colon), password: value.slice(colon + 1) };
}

function tls(s: Settings, forced: boolean): ConnectionOptions | undefined {
  if (!s.redisTls && !forced) return undefined;
  const file = (p: string) => (p === '' ? undefined : fs.readFileSync(p));
  const options: ConnectionOptions = { ca: file(s.redisTlsCaCert), cert: file(s.redisTlsClientCert), key: file(s.redisTlsClientKey) };
  if (s.redisTlsSkipHostnameVerification) options.checkServerIdentity = () => undefined;
  return options;
}

// Options every connection shares. Commands fail at once while disconnected (no offline queue),
// so a dead Redis costs an error, not a stalled request; reconnection goes on forever in the
// background, so a Redis that is not up yet never makes sluice crash-loop.
function baseOptions(s: Settings): RedisOptions {
  return {
    ...auth(s.redisAuth),
    connectTimeout: s.redisConnectTimeoutMs,
    commandTimeout: s.redisTimeoutMs,
    enableAutoPipelining: true,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    retryStrategy: (times) => Math.min(100 * times, 2000),
    tls: tls(s, s.redisUrl.startsWith('rediss://')),
  };
}

function single(s: Settings): Redis {
  const url = s.redisUrl;
  if (/^rediss?:\/\//.test(url)) {
    const parsed = new URL(url);
    const options = baseOptions(s);
    if (parsed.username !== '') options.username = decodeURIComponent(parsed.username);
    if (parsed.password !== '') options.password = decodeURIComponent(parsed.password);
    const db = parsed.pathname.replace(/^\//, '');
    return new Redis({ ...options, host: parsed.hostname.replace(/^\[|\]$/g, ''), port: Number(parsed.port || 6379), db: db === '' ? 0 : Number(db) });
  }
  if (url.startsWith('/')) return new Redis({ ...baseOptions(s), path: url });
  return new Redis({ ...baseOptions(s), ...hostPort(url, 6379) });
}

// Upstream's sentinel form: "<master name>,host:port[,host:port...]".
function sentinel(s: Settings): Redis {
  const [name, ...addrs] = s.redisUrl.split(',').map((x) => x.trim());
  if (name === undefined || addrs.length === 0) throw new Error('REDIS_URL for sentinel must be "<master name>,host:port[,host:port]"');
  const sentinelAuth = auth(s.redisSentinelAuth);
  return new Redis({
    ...baseOptions(s),
    name,
    sentinels: addrs.map((a) => hostPort(a, 26379)),
    sentinelUsername: sentinelAuth.username,
    sentinelPassword: sentinelAuth.password,
    sentinelRetryStrategy: (times) => Math.min(100 * times, 2000),
  });
}

function cluster(s: Settings): Cluster {
  const nodes = s.redisUrl.split(',').map((a) => hostPort(a.replace(/^rediss?:\/\//, ''), 6379));
  const { retryStrategy: _unused, enableAutoPipelining: _off, ...redisOptions } = baseOptions(s);
  const options: ClusterOptions = {
    redisOptions,
    // ioredis' cluster auto-pipelining batches commands per node, then rejects a batch whose
    // scripts' keys span several slots ("All keys in the pipeline should belong to the same slots
    // allocation group"), failing concurrent decisions. Commands written one by one are still
    // pipelined on the socket.
    enableAutoPipelining: false,
    enableOfflineQueue: false,
    clusterRetryStrategy: (times) => Math.min(100 * times, 2000),
    scaleReads: 'master',
    slotsRefreshTimeout: s.redisConnectTimeoutMs,
    // A promoted replica or moved slot is found by the MOVED/ASK redirections ioredis follows;
    // these bound how long a command may chase them.
    maxRedirections: 16,
    retryDelayOnFailover: 100,
    retryDelayOnClusterDown: 100,
    retryDelayOnTryAgain: 100,
  };
  return new Cluster(nodes, options);
}

export function createRedisClients(s: Settings, logger: Logger): { clients: RedisClient[]; cluster: boolean } {
  const make = (): RedisClient => (s.redisType === 'cluster' ? cluster(s) : s.redisType === 'sentinel' ? sentinel(s) : single(s));
  const count = s.redisType === 'cluster' ? 1 : s.redisPoolSize;
  const clients = Array.from({ length: count }, make);
  let lastError = 0;
  for (const c of clients) {
    c.on('ready', () => logger.info({ event: 'redis_ready', type: s.redisType }, 'connected to Redis'));
    c.on('error', (err: Error) => {
      const now = Date.now();
      if (now - lastError < 5_000) return;
      lastError = now;
      logger.warn({ event: 'redis_error', type: s.redisType, error: err.message }, 'Redis connection error');
    });
  }
  return { clients, cluster: s.redisType === 'cluster' };
}
