import type { TABLE } from './table';

// The Settings type, derived from the table's rows: a row's kind (and, for an enum, its choices)
// says the type of its field, so a setting is declared once, in table.ts.

// What each kind of row parses to (parse.ts).
interface KindValue {
  string: string;
  list: string[];
  port: number;
  int: number;
  count: number;
  ratio: number;
  duration: number;
  bool: boolean;
  // 'auto': the cores this process may use (WORKERS).
  'auto-int': number | 'auto';
  // 'auto': 1 / the live replicas registered in Redis (FALLBACK_SHARE).
  share: number | 'auto';
}

type Row = (typeof TABLE)[number];

type ValueOf<R extends Row> = R extends { kind: 'enum'; choices: readonly (infer C)[] } ? C : KindValue[R['kind'] & keyof KindValue];

export type TableSettings = { -readonly [R in Row as R['key']]: ValueOf<R> };

export interface Settings extends TableSettings {
  // The setting whose presence chose the Redis store when no store was named (start-up log).
  storeImpliedBy?: string;
  // Where each setting given explicitly came from: its flag (--grpc-port) or the environment
  // variable read (PORT rather than HTTP_PORT), so that messages name what the user wrote.
  origins?: Partial<Record<keyof Settings, string>>;
}

// Whose behaviour the defaults follow: sluice's own, or envoyproxy/ratelimit's (compat.ts).
export type CompatMode = Settings['compatMode'];
