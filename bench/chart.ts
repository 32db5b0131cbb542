import type { DecisionRow } from './decisions';

export interface Bar {
  label: string;
  value: number;
  // Printed after the bar.
  text: string;
  colour: string;
  // Extra space above this bar (a new group).
  groupStart?: boolean;
}

// A horizontal bar chart, SVG with no dependencies, for the bench's figures. `reference` draws a
// dashed line at that value (e.g. 1.0 = the baseline).
export function horizontalBars(o: {
  title: string;
  caption: string;
  bars: readonly Bar[];
  left: number;
  width: number;
  reference?: { value: number; label: string };
}): string {
  const barHeight = 18;
  const gap = 6;
  const groupGap = 14;
  const top = 48;
  const scale = (o.width - o.left - 170) / Math.max(o.reference?.value ?? 0, ...o.bars.map((b) => b.value), Number.MIN_VALUE);
  const groups = o.bars.filter((b, i) => i > 0 && b.groupStart).length;
  const height = top + o.bars.length * (barHeight + gap) + groups * groupGap + (o.reference ? 40 : 24);
  const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;');
  const out = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${o.width}" height="${height}" font-family="sans-serif" font-size="12">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="10" y="20" font-size="14" font-weight="bold">${esc(o.title)}</text>`,
    `<text x="10" y="38" fill="#555">${esc(o.caption)}</text>`,
  ];
  let y = top;
  o.bars.forEach((b, i) => {
    if (i > 0 && b.groupStart) y += groupGap;
    const w = Math.max(1, b.value * scale);
    out.push(`<text x="${o.left - 8}" y="${y + 13}" text-anchor="end">${esc(b.label)}</text>`);
    out.push(`<rect x="${o.left}" y="${y}" width="${w.toFixed(1)}" height="${barHeight}" fill="${b.colour}"/>`);
    out.push(`<text x="${(o.left + w + 6).toFixed(1)}" y="${y + 13}">${esc(b.text)}</text>`);
    y += barHeight + gap;
  });
  if (o.reference) {
    const x = (o.left + o.reference.value * scale).toFixed(1);
    out.push(`<line x1="${x}" y1="${top - 4}" x2="${x}" y2="${height - 30}" stroke="#333" stroke-dasharray="4 3"/>`);
    out.push(`<text x="${x}" y="${height - 14}" text-anchor="middle" fill="#333">${esc(o.reference.label)}</text>`);
  }
  out.push('</svg>');
  return out.join('\n') + '\n';
}

const fmt = (n: number) => Math.round(n).toLocaleString('en-US');

// One `npm run bench` decisions run: decisions/s of each row as a fraction of the empty handler's
// (on sluice's gRPC server) with the same requests and load generator.
export function decisionsChart(rows: readonly DecisionRow[], caption: string): string {
  const colour: Record<DecisionRow['target'], string> = { 'empty handler': '#9e9e9e', 'memory store': '#4c78a8', 'Redis store': '#e45756' };
  return horizontalBars({
    title: 'sluice decisions/s, as a fraction of an empty handler on its own gRPC server (same run)',
    caption,
    left: 330,
    width: 820,
    reference: { value: 1, label: '1.0 = empty handler' },
    bars: rows.map((r) => ({
      label: `${r.target}, ${r.target === 'empty handler' ? '' : `${r.algorithm}, `}${r.descriptors} descr., ${r.keys === 1 ? 'hot key' : `${fmt(r.keys)} keys`}`,
      value: r.ratio,
      text: `${r.ratio.toFixed(2)}× (${fmt(r.reqPerSec)}/s)`,
      colour: colour[r.target],
    })),
  });
}
