import fs from 'node:fs';
import type { ConnectionOptions } from 'node:tls';
import { Cluster, type ClusterOptions, Redis, type RedisOptions } from 'ioredis';
import type { Logger } from '../../logger';
import { SettingsError } from '../../errors';
import { redactRedisUrl } from '../../redact';
import type { RedisClient } from './scripts';

// One Redis to connect to. The fields are named as REDIS_URL's settings are, so that a Settings
// object is one (settings/derived.ts builds the per-second and global ones); `names` are the
// settings a message names, REDIS_URL, REDIS_TYPE and REDIS_AUTH unless given.
export interface RedisTarget {
  redisUrl: string;
  redisType: 'single' | 'sentinel' | 'cluster';
  redisAuth: string;
  redisSentinelAuth: string;
  redisTls: boolean;
  redisTlsCaCert: string;
  redisTlsClientCert: string;
  redisTlsClientKey: string;
  redisTlsSkipHostnameVerification: boolean;
  redisPoolSize: number;
  redisConnectTimeoutMs: number;
  names?: { url: string; type: string; auth: string };
}

interface HostPort {
  host: string;
  port: number;
}

const FORMS: Record<RedisTarget['redisType'], string> = {
  single: 'expected redis://[user:password@]host[:port][/db], rediss://..., host:port or a unix socket path (/path/to/redis.sock)',
  sentinel: 'expected <master name>,host:port[,host:port...] (REDIS_TYPE=sentinel)',
  cluster: 'expected host:port[,host:port...] (REDIS_TYPE=cluster; redis:// or rediss:// before each is allowed)',
};

// A host name, IPv4 address or [IPv6] address, optionally followed by :port.
const HOST_PORT = /^(\[[0-9A-Fa-f:.]+(?:%[\w.-]+)?\]|[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?)(?::(.*))?$/;

// Why `text` is not host[:port], or undefined when it is.
function hostPortProblem(text: string): string | undefined {
  if (text === '') return 'is empty';
  if (text.includes('@')) return 'has a user or password, which only a redis:// URL may hold (or give it in REDIS_AUTH)';
  const m = HOST_PORT.exec(text);
  if (m === null) {
    if (!text.startsWith('[') && (text.match(/:/g) ?? []).length > 1) return 'is not host:port (an IPv6 address goes in brackets: [::1]:6379)';
    if (text.startsWith(':')) return 'has no host';
    return 'is not host:port';
  }
  if (m[2] !== undefined && portNumber(m[2]) === undefined) return 'is not host:port (port must be 1..65535)';
  return undefined;
}

function portNumber(text: string): number | undefined {
  if (!/^\d{1,5}$/.test(text)) return undefined;
  const n = Number(text);
  return n >= 1 && n <= 65_535 ? n : undefined;
}

// Assumes hostPortProblem(text) === undefined.
function hostPort(text: string, defaultPort: number): HostPort {
  const m = HOST_PORT.exec(text.trim())!;
  return { host: m[1].replace(/^\[|\]$/g, ''), port: m[2] === undefined ? defaultPort : Number(m[2]) };
}

// A redis:// or rediss:// URL cut into its parts, by hand rather than by new URL(): a password is
// pasted unencoded more often than not, and may hold '@', ':', '/', '#' or '?'. The userinfo ends
// at the last '@' (a host, port or database number has none), as most Redis clients read it; the
// user name ends at its first ':' (Redis user names cannot hold one).
interface UrlSplit {
  userinfo?: string;
  address: string;
  path: string;
}

function splitUrl(url: string): UrlSplit {
  const rest = url.replace(/^rediss?:\/\//, '');
  const at = rest.lastIndexOf('@');
  const afterAt = rest.slice(at + 1);
  const slash = afterAt.indexOf('/');
  return {
    userinfo: at < 0 ? undefined : rest.slice(0, at),
    address: slash < 0 ? afterAt : afterAt.slice(0, slash),
    path: slash < 0 ? '' : afterAt.slice(slash + 1),
  };
}

// Percent-escapes decoded, as in any URL; a '%' that does not start one (or starts bytes that are
// not UTF-8) is kept as written, so a pasted '100%sure' is that password. A password holding '%'
// followed by two hex digits is written with %25 for its '%'.
function decodeLenient(text: string): string {
  return text.replace(/(?:%[0-9A-Fa-f]{2})+/g, (run) => {
    try {
      return decodeURIComponent(run);
    } catch {
      return run;
    }
  });
}

// Assumes urlProblem(url, true) === undefined.
export function redisUrlParts(url: string): { tls: boolean; username?: string; password?: string; host: string; port: number; db: number } {
  const { userinfo, address, path } = splitUrl(url);
  const { host, port } = hostPort(address, 6379);
  const colon = userinfo?.indexOf(':') ?? -1;
  const user = userinfo === undefined ? '' : colon < 0 ? userinfo : userinfo.slice(0, colon);
  const password = userinfo === undefined || colon < 0 ? '' : userinfo.slice(colon + 1);
  return {
    tls: url.startsWith('rediss://'),
    username: user === '' ? undefined : decodeLenient(user),
    password: password === '' ? undefined : decodeLenient(password),
    host,
    port,
    db: path === '' ? 0 : Number(path),
  };
}

// Why a redis:// or rediss:// URL is wrong, or undefined when it is fine. Checked by hand rather
// than by new URL(), which accepts empty hosts and says only "Invalid URL" otherwise.
function urlProblem(url: string, allowDb: boolean): string | undefined {
  const { userinfo, address, path } = splitUrl(url);
  if (userinfo !== undefined && !allowDb) return 'has a user or password (use REDIS_AUTH with REDIS_TYPE=cluster)';
  if (address === '' || address.startsWith(':')) return 'has no host';
  const problem = hostPortProblem(address);
  if (problem !== undefined) return problem;
  if (/[?#]/.test(path)) return 'has a query or fragment, which sluice does not use';
  if (path !== '' && !allowDb) return 'has a database number, which Redis Cluster does not have';
  if (path !== '' && !/^\d+$/.test(path)) return `has database '${path}' (the database must be an integer 0 or more)`;
  return undefined;
}

function singleProblem(url: string): string | undefined {
  if (url.startsWith('/')) return url.length > 1 && !url.endsWith('/') ? undefined : 'is not a unix socket path';
  const scheme = /^([A-Za-z][A-Za-z0-9+.-]*):\/\//.exec(url);
  if (scheme !== null) {
    if (!/^rediss?$/.test(scheme[1])) return `has scheme '${scheme[1]}://' (only redis:// and rediss://)`;
    return urlProblem(url, true);
  }
  if (url.includes(',')) return 'is a list (a list needs REDIS_TYPE=sentinel or cluster)';
  return hostPortProblem(url);
}

// A list holding a user or password is refused as a whole: the password may hold ',', so no single
// entry of it can be shown.
function sentinelProblem(url: string): string | undefined {
  if (url.includes('@')) return 'has a user or password (give them in REDIS_AUTH and REDIS_SENTINEL_AUTH)';
  const [name, ...addresses] = url.split(',').map((x) => x.trim());
  if (addresses.length === 0) return 'has no sentinel address';
  if (name === '') return 'has no master name';
  if (/[:/]/.test(name)) return `starts with '${name}', which is not a master name`;
  for (const a of addresses) {
    const problem = hostPortProblem(a);
    if (problem !== undefined) return `has sentinel address '${redactRedisUrl(a)}' that ${problem}`;
  }
  return undefined;
}

function clusterProblem(url: string): string | undefined {
  if (url.includes('@')) return 'has a user or password (use REDIS_AUTH with REDIS_TYPE=cluster)';
  for (const node of url.split(',').map((x) => x.trim())) {
    if (node === '') return 'has an empty entry';
    const scheme = /^([A-Za-z][A-Za-z0-9+.-]*):\/\//.exec(node);
    if (scheme !== null && !/^rediss?$/.test(scheme[1])) return `has scheme '${scheme[1]}://' (only redis:// and rediss://)`;
    const problem = scheme === null ? hostPortProblem(node) : urlProblem(node, false);
    if (problem !== undefined) return `has node '${redactRedisUrl(node)}' that ${problem}`;
  }
  return undefined;
}

// Fails startup, before anything listens, on a REDIS_URL that cannot work for REDIS_TYPE.
export function validateRedisUrl(s: RedisTarget): void {
  const url = s.redisUrl.trim();
  const check = s.redisType === 'sentinel' ? sentinelProblem : s.redisType === 'cluster' ? clusterProblem : singleProblem;
  const problem = url === '' ? 'is empty' : check(url);
  if (problem === undefined) return;
  const message = `REDIS_URL: '${redactRedisUrl(s.redisUrl)}' ${problem}; ${FORMS[s.redisType]}`;
  // The problems and forms are written with REDIS_URL's names; another Redis' replace them.
  const names = s.names;
  const named =
    names === undefined
      ? message
      : message.replace(/\bREDIS_(URL|TYPE|AUTH)\b/g, (_, n: string) => (n === 'URL' ? names.url : n === 'TYPE' ? names.type : names.auth));
  throw new SettingsError(named);
}

function auth(value: string): { username?: string; password?: string } {
  if (value === '') return {};
  const colon = value.indexOf(':');
  return colon < 0 ? { password: value } : { username: value.slice(0, colon), password: value.slice(colon + 1) };
}

function tls(s: RedisTarget, forced: boolean): ConnectionOptions | undefined {
  if (!s.redisTls && !forced) return undefined;
  // Read once, at start: a file that cannot be read is a mistake in the setting naming it.
  const file = (p: string, setting: string) => {
    if (p === '') return undefined;
    try {
      return fs.readFileSync(p);
    } catch (err) {
      throw new SettingsError(`${setting}: cannot read '${p}': ${(err as Error).message}`);
    }
  };
  const options: ConnectionOptions = {
    ca: file(s.redisTlsCaCert, 'REDIS_TLS_CACERT'),
    cert: file(s.redisTlsClientCert, 'REDIS_TLS_CLIENT_CERT'),
    key: file(s.redisTlsClientKey, 'REDIS_TLS_CLIENT_KEY'),
  };
  if (s.redisTlsSkipHostnameVerification) options.checkServerIdentity = () => undefined;
  return options;
}

// Options every connection shares. No auto-pipelining: the store already sends the decisions of one
// event-loop turn as one script call (store/redis.ts), and ioredis' per-tick pipeline around that
// one command cost more than it saved. Server CPU per request, alternating runs (h2load, 3
// descriptors, sluice alone on one core): one stream per connection 113–124 µs with it, 93–109
// without; 32 streams 54–64 against 45–62. Commands written one by one are still pipelined on the
// socket (none waits for the reply of another).
//
// Commands fail at once while disconnected (no offline queue),
// so a dead Redis costs an error, not a stalled request; reconnection goes on forever in the
// background, so a Redis that is not up yet never makes sluice crash-loop.
//
// No command timeout, and nothing re-sent after a reconnect: a script call is never abandoned or
// repeated, because a call given up on whose script then runs anyway would be counted twice (by
// Redis, and by the fallback that answered instead and writes its hits back). How long a caller
// waits is the resilience stages' business (the deadline answers by fallback; the call goes on).
function baseOptions(s: RedisTarget): RedisOptions {
  return {
    ...auth(s.redisAuth),
    connectTimeout: s.redisConnectTimeoutMs,
    autoResendUnfulfilledCommands: false,
    enableAutoPipelining: false,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    retryStrategy: (times) => Math.min(100 * times, 2000),
    tls: tls(s, s.redisUrl.startsWith('rediss://')),
  };
}

function single(s: RedisTarget): Redis {
  const url = s.redisUrl;
  if (/^rediss?:\/\//.test(url)) {
    const { tls: _tls, username, password, ...where } = redisUrlParts(url);
    const options = baseOptions(s);
    if (username !== undefined) options.username = username;
    if (password !== undefined) options.password = password;
    return new Redis({ ...options, ...where });
  }
  if (url.startsWith('/')) return new Redis({ ...baseOptions(s), path: url });
  return new Redis({ ...baseOptions(s), ...hostPort(url, 6379) });
}

// Upstream's sentinel form: "<master name>,host:port[,host:port...]".
function sentinel(s: RedisTarget): Redis {
  const [name, ...addrs] = s.redisUrl.split(',').map((x) => x.trim());
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

function cluster(s: RedisTarget): Cluster {
  const nodes = s.redisUrl.split(',').map((a) => hostPort(a.replace(/^rediss?:\/\//, ''), 6379));
  // Node connections keep ioredis' own offline queue: one is opened by the first command sent to
  // it (lazily) and never reconnects by itself (the cluster client replaces it), so the queue only
  // holds commands while it opens, bounded by the connect timeout. Without it such a command
  // fails, or waits out a failover retry. The cluster's own offline queue stays off (below).
  const { retryStrategy: _retry, enableOfflineQueue: _queue, ...redisOptions } = baseOptions(s);
  const options: ClusterOptions = {
    redisOptions,
    // ioredis' cluster auto-pipelining batches commands per node, then rejects a batch whose
    // scripts' keys span several slots ("All keys in the pipeline should belong to the same slots
    // allocation group"), failing concurrent decisions.
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

export function createRedisClients(s: RedisTarget, logger: Logger): { clients: RedisClient[]; cluster: boolean } {
  validateRedisUrl(s);
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
