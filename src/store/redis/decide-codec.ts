import { ALGORITHM_IMPLS, type AlgorithmImpl, type LimitSpec, specOf, type State } from '../../algorithms';
import { windowStart } from '../../algorithms/types';
import { poolAmple, poolImpl, poolPendingMs, poolUnits } from '../region/pool';
import type { AllowanceOutcome } from '../region/types';
import type { Arg } from './scripts';
import type { Stored, StoredCheck, StoredRefund } from './spec';

// The decide script's language (lua/decide.lua): the keys and arguments a batch of requests is
// written as, and its reply read back into outcomes with the same algorithm code the memory store
// runs. Pure functions: nothing here talks to Redis.

export interface GroupResult {
  checks: number[];
  admitted: boolean;
  now: number;
  outcomes: AllowanceOutcome[];
  // Only for a group of a request spanning slots (combine() may have to report them): each
  // limit's counter before the request.
  before?: Before[];
}

export interface Before {
  remaining: number;
  resetMs: number;
}

export type DecideRequests = readonly { all: readonly StoredCheck[]; idx: number[] }[];

// The decide script's keys and arguments for `requests` (see lua/decide.lua): the batch's counter
// keys, each once; then whether denied hits count, the time, the scope, the number of requests,
// the batch's limit specs (each once), the window-hash groups, and per request its number of
// limits and per limit which key and spec (one number) and its hits. Keys and specs named by
// number cost the script array lookups instead of strings to hash and compare per limit. With
// `windows`, the keys of fixed windows kept in window hashes come first, grouped by period (one
// hash per group), each group named by a spec of its period.
export function decideArgs(requests: DecideRequests, countDenied: boolean, time: string, scope: string, windows?: WindowBase): [number, Arg[]] {
  const keys: string[] = [];
  const keyNumbers = new Map<string, number>();
  const specs: string[] = [];
  const specNumbers = new Map<string, number>();
  // Per key kept in a window hash: its period; the first spec seen per period.
  const keyPeriods: number[] = [];
  const periodSpecs = new Map<number, number>();
  // Per limit: its key's number, its spec's number, its hits; per request first its count.
  const limits: number[] = [];
  for (const r of requests) {
    limits.push(r.idx.length);
    for (const i of r.idx) {
      const c = r.all[i];
      const text = decideSpec(c, windows);
      let s = specNumbers.get(text);
      if (s === undefined) specNumbers.set(text, (s = specs.push(text)));
      let k = keyNumbers.get(c.key);
      if (k === undefined) {
        keyNumbers.set(c.key, (k = keys.push(c.key)));
        if (inWindowHash(c, windows)) {
          keyPeriods[k] = c.periodMs;
          if (!periodSpecs.has(c.periodMs)) periodSpecs.set(c.periodMs, s);
        }
      }
      limits.push(k, s, c.hits);
    }
  }
  // Key k is the call's key place[k]: window-hash keys first, period by period, then the others.
  let args: Arg[] = keys;
  let place: number[] | undefined;
  const groups: number[] = [];
  if (periodSpecs.size > 0) {
    args = [];
    place = [];
    for (const [period, spec] of periodSpecs) {
      const first = args.length;
      for (let k = 1; k <= keys.length; k++) if (keyPeriods[k] === period) place[k] = args.push(keys[k - 1]);
      groups.push(spec, args.length - first);
    }
    for (let k = 1; k <= keys.length; k++) if (keyPeriods[k] === undefined) place[k] = args.push(keys[k - 1]);
  }
  const n = args.length;
  args.push(countDenied ? '1' : '0', time, scope, requests.length, specs.length);
  for (const text of specs) args.push(text);
  args.push(groups.length / 2);
  for (const g of groups) args.push(g);
  for (let j = 0; j < limits.length; ) {
    const count = limits[j++];
    args.push(count);
    for (let e = 0; e < count; e++, j += 3) {
      const k = place === undefined ? limits[j] : place[limits[j]];
      args.push((limits[j + 1] - 1) * n + k, limits[j + 2]);
    }
  }
  return [n, args];
}

// The decide script's time: whole microseconds of Redis' clock, or a test's explicit time in ms
// (a string). See clock() in lua/algorithms.lua.
function replyTime(raw: unknown): number {
  return typeof raw === 'string' ? Number(raw) : (raw as number) / 1000;
}

// WINDOW_COUNTERS=hash: the base of the names of the hashes that hold a period's fixed windows
// (the script appends the window's start, Redis time in ms; see fixed_hash in lua/algorithms.lua).
// `{}` keeps the names apart from every counter key (keys.ts escapes braces in their parts).
export type WindowBase = (periodMs: number) => string;

export function windowBase(prefix: string): WindowBase {
  // One text per period, made once: every window-hash limit of every batch asks for it.
  const made = new Map<number, string>();
  return (periodMs) => {
    let base = made.get(periodMs);
    if (base === undefined) made.set(periodMs, (base = `${prefix}{}windows|fixed_window:${periodMs}|`));
    return base;
  };
}

// Whether `spec`'s counter is a field of its window's hash: fixed windows in sluice's layout.
function inWindowHash(spec: Stored<LimitSpec>, windows: WindowBase | undefined): windows is WindowBase {
  return windows !== undefined && spec.algorithm === 'fixed_window' && spec.layout === undefined;
}

// A limit's spec as decide.lua takes it: one text, which the script parses once per library load;
// a window-hash spec ends with its hashes' base.
export function decideSpec(c: Pick<StoredCheck, 'algorithm' | 'limit' | 'periodMs' | 'burst' | 'mode' | 'layout'>, windows?: WindowBase): string {
  if (inWindowHash(c, windows)) return `fixed_window_hash:${c.limit}:${c.periodMs}:${c.burst}:${c.mode}:${windows(c.periodMs)}`;
  return `${luaAlgorithm(c)}:${c.limit}:${c.periodMs}:${c.burst}:${c.mode}`;
}

// The scripts' name of a spec's algorithm: the fixed window in upstream's layout has its own
// (its state is stored as the count alone; see fixed_window_upstream in lua/algorithms.lua), and
// so has one in a window hash, followed by its hashes' base (spec_from in lua/algorithms.lua).
export function luaAlgorithm(spec: Stored<LimitSpec>, windows?: WindowBase): string {
  if (spec.layout === 'pool') return 'pool';
  if (spec.layout === 'upstream') return 'fixed_window_upstream';
  if (inWindowHash(spec, windows)) return `fixed_window_hash|${windows(spec.periodMs)}`;
  return spec.algorithm;
}

function implFor(spec: Stored<LimitSpec>): AlgorithmImpl {
  return spec.layout === 'pool' ? poolImpl : ALGORITHM_IMPLS[spec.algorithm];
}

// A counter's state as the scripts store it ("a:b[:c]", numbers exact: see lua/algorithms.lua);
// a fixed window's count alone (upstream's layout, where the key names its window, or a window
// hash's field), whose window is the current one.
function decodeState(raw: unknown, spec?: Stored<LimitSpec>, nowMs = 0): State | undefined {
  if (raw === null || raw === undefined) return undefined;
  const text = typeof raw === 'string' ? raw : String(raw);
  const colon = text.indexOf(':');
  if (colon < 0) return spec?.algorithm === 'fixed_window' && spec.layout !== 'pool' ? [windowStart(nowMs, spec.periodMs), Number(text)] : [Number(text)];
  // Windows' two numbers (most states) without split's array of strings: once per limit and answer.
  if (text.indexOf(':', colon + 1) < 0) return [Number(text.slice(0, colon)), Number(text.slice(colon + 1))];
  return text.split(':').map(Number);
}

// What the script decided for one limit (`flags`: 1 allowed, 2 consumed), and what follows from
// the counter's state before and the script's time: the same view and decide functions as the
// memory store's, so both stores answer alike. With `before`, the counter before the request is
// added to it.
function outcomeFrom(c: StoredCheck, flags: number, raw: unknown, now: number, before?: Before[]): AllowanceOutcome {
  const impl = implFor(c);
  const state = decodeState(raw, c, now);
  const allowed = (flags & 1) === 1;
  const consumed = (flags & 2) === 2;
  const verdict = impl.decide(state, c, c.hits, now);
  const was = impl.view(state, c, now);
  const after = consumed ? impl.view(verdict.next, c, now) : was;
  before?.push({ remaining: was.remaining, resetMs: was.resetMs });
  const outcome: AllowanceOutcome = {
    allowed,
    consumed,
    remaining: after.remaining,
    resetMs: after.resetMs,
    retryAfterMs: allowed ? 0 : verdict.retryAfterMs,
    usedBefore: was.used,
  };
  if (c.layout === 'pool') {
    outcome.held = state === undefined ? undefined : poolUnits(consumed ? verdict.next : state, now);
    outcome.ample = state !== undefined && poolAmple(state, now);
    const pending = state === undefined ? undefined : poolPendingMs(state, now);
    if (pending !== undefined) outcome.pendingMs = pending;
  }
  return outcome;
}

// What the groups consumed, as refunds (each at its own group's Redis time).
export function consumed(all: readonly StoredCheck[], groups: GroupResult[]): StoredRefund[] {
  const out: StoredRefund[] = [];
  for (const g of groups) {
    g.checks.forEach((i, j) => {
      if (!g.outcomes[j].consumed) return;
      const c = all[i];
      out.push({ key: c.key, ...specOf(c), hits: c.hits, decidedAtMs: g.now });
    });
  }
  return out;
}

// A multi-slot decision's time: the latest of its groups' clocks (cluster nodes' clocks differ).
export function latest(groups: GroupResult[]): number | undefined {
  return groups.length === 0 ? undefined : groups.reduce((t, g) => Math.max(t, g.now), -Infinity);
}

// The decide script's reply for `requests` (see lua/decide.lua): its time, then per request
// whether it was admitted (-1: not decided, with the error) and per limit its flags (1 allowed,
// 2 consumed) when its counter had no state before, else the flags' digit and that state. With
// scope 'group' each result also says its counters before the request (see combine()).
export function readDecideReply(reply: unknown[], requests: DecideRequests, scope: 'request' | 'group' | 'peek'): (GroupResult | Error)[] {
  const now = replyTime(reply[0]);
  let p = 1;
  return requests.map((r) => {
    const admitted = reply[p++];
    if (admitted === -1) return new Error(String(reply[p++]));
    const before: Before[] | undefined = scope === 'group' ? [] : undefined;
    const outcomes = r.idx.map((i) => {
      const entry = reply[p++];
      if (typeof entry === 'number') return outcomeFrom(r.all[i], entry, undefined, now, before);
      const text = String(entry);
      return outcomeFrom(r.all[i], text.charCodeAt(0) - 48, text.slice(1), now, before);
    });
    return { checks: r.idx, admitted: admitted === 1, now, outcomes, before };
  });
}
