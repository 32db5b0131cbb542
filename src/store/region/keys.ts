// The keys of the multi-region layer, each the counter key with a suffix, so that it keeps the
// counter's hash tag (same slot on a cluster).
export interface RegionKeys {
  // The region's allowance (regional Redis).
  pool(counterKey: string): string;
  // The region's refill lock for it (regional Redis).
  lock(counterKey: string): string;
  // The region's lock for leasing a fixed window's next window ahead of its start (regional Redis).
  aheadLock(counterKey: string): string;
  // The regions' demand for the counter (global Redis).
  demand(counterKey: string): string;
  // The region's own counter while cut off under a share policy (regional Redis).
  partition(counterKey: string): string;
}

export function regionKeys(region: string): RegionKeys {
  return {
    pool: (k) => `${k}:pool:${region}`,
    lock: (k) => `${k}:pool:${region}:refill`,
    aheadLock: (k) => `${k}:pool:${region}:ahead`,
    demand: (k) => `${k}:regions`,
    partition: (k) => `${k}:partition:${region}`,
  };
}
