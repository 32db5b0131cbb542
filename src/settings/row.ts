// The shape of one row of the settings table (table.ts).

export type Kind = 'string' | 'list' | 'port' | 'int' | 'count' | 'ratio' | 'share' | 'bool' | 'enum' | 'duration' | 'auto-int';

// envoyproxy/ratelimit's default where it differs from sluice's (COMPAT_MODE=upstream, compat.ts):
// a value, or another setting's value as in force (`same`), or its negation (`not`).
export type UpstreamDefault = { value: string | number | boolean } | { same: string } | { not: string };

// One row as written in the table; `key` names the field of Settings it fills (types.ts).
export interface Row {
  key: string;
  flag: string;
  env: readonly string[];
  kind: Kind;
  def: unknown;
  choices?: readonly string[];
  upstream?: UpstreamDefault;
  help: string;
}
