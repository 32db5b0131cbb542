import type { LimitSpec } from '../../algorithms';
import type { RefundEntry } from '../shared';
import type { LimitCheck } from '../store';

// How the Redis scripts keep a counter (lua/algorithms.lua): the core's layouts (LimitSpec), and
// 'pool', a region's allowance leased from the global budget (the `pool` algorithm). Only this
// store and the multi-region layer that wraps it (store/region/) know of allowances.
export type StoredLayout = NonNullable<LimitSpec['layout']> | 'pool';

// Anything carrying a limit spec (a check, a refund, a lease's spec) as this store takes it.
export type Stored<T extends LimitSpec> = Omit<T, 'layout'> & { layout?: StoredLayout };

export type StoredCheck = Stored<LimitCheck>;
export type StoredRefund = Stored<RefundEntry>;
