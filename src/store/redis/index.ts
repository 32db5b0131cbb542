// The Redis store, by concern: store.ts decides (batching, cluster slot groups, readiness),
// shared-ops.ts the operations only a shared store has, decide-codec.ts the decide script's
// arguments and reply, spec.ts the counter layouts only it keeps, scripts.ts how a script call
// reaches Redis, connection.ts the clients.
export { decideArgs, decideSpec, type WindowBase, windowBase } from './decide-codec';
export type { RedisClient } from './scripts';
export type { Stored, StoredCheck, StoredLayout, StoredRefund } from './spec';
export { RedisStore, type RedisStoreOptions } from './store';
