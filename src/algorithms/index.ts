import type { Algorithm } from '../model';
import { fixedWindow } from './fixed-window';
import { gcra } from './gcra';
import { slidingWindow } from './sliding-window';
import { tokenBucket } from './token-bucket';
import type { AlgorithmImpl } from './types';

export const ALGORITHM_IMPLS: Readonly<Record<Algorithm, AlgorithmImpl>> = {
  fixed_window: fixedWindow,
  sliding_window: slidingWindow,
  token_bucket: tokenBucket,
  gcra,
};

export { capacity, isWindow, specOf } from './types';
export type { AlgorithmImpl, AlgorithmSpec, LimitSpec, State, Verdict, View } from './types';
