import assert from 'node:assert/strict';

// Prometheus' text exposition format, read strictly, for assertions on parsed series.

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

// A strict reader of the Prometheus text format (version 0.0.4): every line is a comment, blank,
// or `name{label="value",...} number`; every sample's family has a TYPE line before it. (NaN may
// be spelt Nan, as prom-client writes Node's event-loop gauges before their first sample:
// Prometheus reads floats as Go's ParseFloat does, case-insensitively.)
export function parseExposition(text: string): Sample[] {
  const typed = new Set<string>();
  const samples: Sample[] = [];
  for (const [i, line] of text.split('\n').entries()) {
    if (line === '') continue;
    const type = /^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)$/.exec(line);
    if (type) {
      typed.add(type[1]);
      continue;
    }
    if (line.startsWith('# HELP ')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (-?(?:\d+(?:\.\d+)?(?:e[+-]?\d+)?|NaN|Nan|\+Inf|-Inf))$/.exec(line);
    assert.ok(m, `line ${i + 1} is not exposition format: ${line}`);
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?/g)) labels[l[1]] = l[2];
    const family = m[1].replace(/_(bucket|sum|count)$/, '');
    assert.ok(typed.has(m[1]) || typed.has(family), `line ${i + 1}: ${m[1]} has no TYPE`);
    samples.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return samples;
}

export function value(samples: Sample[], name: string, labels: Record<string, string> = {}): number {
  const found = samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  return found.reduce((a, s) => a + s.value, 0);
}

// A family's samples as "key=value,…" label text (labels sorted) → value, for exact comparisons.
export function seriesOf(samples: Sample[], name: string, drop: readonly string[] = []): Record<string, number> {
  const out: Record<string, number> = {};
  for (const s of samples) {
    if (s.name !== name) continue;
    const text = Object.keys(s.labels)
      .filter((k) => !drop.includes(k))
      .sort()
      .map((k) => `${k}=${s.labels[k]}`)
      .join(',');
    out[text] = (out[text] ?? 0) + s.value;
  }
  return out;
}
