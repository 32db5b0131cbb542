// Durations as written in config and settings: one or more <integer><unit> parts, largest unit
// first, each unit at most once ("1h30m", "500ms", "2d"). Returns milliseconds.

const UNIT_MS: Readonly<Record<string, number>> = {
  w: 604_800_000,
  d: 86_400_000,
  h: 3_600_000,
  m: 60_000,
  s: 1_000,
  ms: 1,
};

// 'ms' must be tried before 'm' so that "500ms" is not read as 500 minutes followed by "s".
const PART = /^(\d+)(ms|w|d|h|m|s)/;

const EXPECTED = 'expected one like "500ms", "30s", "5m", "1h", "2d", "1w" or "1h30m"';

export function parseDuration(text: string): number {
  if (text.length === 0) throw new Error(`"" is not a duration: ${EXPECTED}`);
  let rest = text;
  let total = 0;
  let lastUnitMs = Infinity;
  while (rest.length > 0) {
    const m = PART.exec(rest);
    if (m === null) throw new Error(`"${text}" is not a duration: ${EXPECTED}`);
    const unitMs = UNIT_MS[m[2]];
    if (unitMs >= lastUnitMs) {
      throw new Error(`"${text}" is not a duration: units must go from largest to smallest, each once`);
    }
    lastUnitMs = unitMs;
    total += Number(m[1]) * unitMs;
    rest = rest.slice(m[0].length);
  }
  if (!Number.isSafeInteger(total)) throw new Error(`"${text}" is too large a duration`);
  return total;
}

// Inverse of parseDuration for display ("90000" → "1m30s"); 0 → "0s".
export function formatDuration(ms: number): string {
  if (ms === 0) return '0s';
  let rest = ms;
  let out = '';
  for (const [unit, unitMs] of Object.entries(UNIT_MS)) {
    const n = Math.floor(rest / unitMs);
    if (n > 0) {
      out += `${n}${unit}`;
      rest -= n * unitMs;
    }
  }
  return out;
}
