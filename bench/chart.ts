import type { DecisionRow } from './decisions';

// A horizontal bar chart (SVG, no dependencies) of one `npm run bench` run: decisions/s of each
// row as a fraction of the empty grpc-js handler's with the same requests and load generator.
export function decisionsChart(rows: readonly DecisionRow[], caption: string): string {
  const barHeight = 18;
  const gap = 6;
  const left = 330;
  const width = 820;
  const scale = (width - left - 150) / Math.max(1, ...rows.map((r) => r.ratio));
  const top = 48;
  const height = top + rows.length * (barHeight + gap) + 40;
  const colour: Record<DecisionRow['target'], string> = { 'empty handler': '#9e9e9e', 'memory store': '#4c78a8', 'Redis store': '#e45756' };
  const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;');
  const fmt = (n: number) => Math.round(n).toLocaleString('en-US');
  const out = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif" font-size="12">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="10" y="20" font-size="14" font-weight="bold">sluice decisions/s, as a fraction of an empty grpc-js handler (same requests, same run)</text>`,
    `<text x="10" y="38" fill="#555">${esc(caption)}</text>`,
  ];
  rows.forEach((r, i) => {
    const y = top + i * (barHeight + gap);
    const keys = r.keys === 1 ? 'hot key' : `${fmt(r.keys)} keys`;
    const label = `${r.target}, ${r.target === 'empty handler' ? '' : `${r.algorithm}, `}${r.descriptors} descr., ${keys}`;
    const w = Math.max(1, r.ratio * scale);
    out.push(`<text x="${left - 8}" y="${y + 13}" text-anchor="end">${esc(label)}</text>`);
    out.push(`<rect x="${left}" y="${y}" width="${w.toFixed(1)}" height="${barHeight}" fill="${colour[r.target]}"/>`);
    out.push(`<text x="${(left + w + 6).toFixed(1)}" y="${y + 13}">${r.ratio.toFixed(2)}× (${fmt(r.reqPerSec)}/s)</text>`);
  });
  const x1 = left + scale;
  out.push(`<line x1="${x1.toFixed(1)}" y1="${top - 4}" x2="${x1.toFixed(1)}" y2="${height - 30}" stroke="#333" stroke-dasharray="4 3"/>`);
  out.push(`<text x="${x1.toFixed(1)}" y="${height - 14}" text-anchor="middle" fill="#333">1.0 = empty handler</text>`);
  out.push('</svg>');
  return out.join('\n') + '\n';
}
