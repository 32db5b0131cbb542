// A small SVG bar chart with no dependencies, for `sluice simulate`: one panel per algorithm, each
// bin showing stacked bars behind (what was offered) and stacked bars in front (what was admitted).
// Every number is printed with a fixed precision so the same input gives the same bytes.

export interface Bars {
  label: string;
  colour: string;
  values: readonly number[];
}

export interface Panel {
  title: string;
  // Drawn first, stacked; `front` is drawn over it, stacked from the same baseline.
  back: readonly Bars[];
  front: readonly Bars[];
}

export interface BarChart {
  title: string;
  subtitle: string;
  yLabel: string;
  bins: number;
  // Vertical grid lines with a label under the last panel (e.g. window edges).
  ticks: readonly { bin: number; label: string }[];
  // A dashed horizontal line (e.g. the sustained rate per bin).
  guide?: { value: number; label: string };
  panels: readonly Panel[];
}

const WIDTH = 860;
const LEFT = 56;
const RIGHT = 20;
const TOP = 70;
const PANEL_HEIGHT = 110;
const PANEL_GAP = 34;

const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
const n = (x: number) => (Math.round(x * 10) / 10).toFixed(1);

function stackTotal(stacks: readonly Bars[], bin: number): number {
  return stacks.reduce((sum, s) => sum + (s.values[bin] ?? 0), 0);
}

// A round axis maximum (1, 2 or 5 × 10^k) at or above `x`.
function niceMax(x: number): number {
  if (x <= 0) return 1;
  const p = 10 ** Math.floor(Math.log10(x));
  return [1, 2, 5, 10].map((m) => m * p).find((m) => m >= x) as number;
}

function stackRects(stacks: readonly Bars[], bin: number, at: { x: number; w: number; base: number; scale: number }): string[] {
  const out: string[] = [];
  let y = at.base;
  for (const s of stacks) {
    const h = (s.values[bin] ?? 0) * at.scale;
    if (h <= 0) continue;
    y -= h;
    out.push(`<rect x="${n(at.x)}" y="${n(y)}" width="${n(at.w)}" height="${n(h)}" fill="${s.colour}"/>`);
  }
  return out;
}

function legend(panel: Panel | undefined, y: number): string[] {
  if (panel === undefined) return [];
  const out: string[] = [];
  let x = LEFT;
  for (const s of [...panel.back, ...panel.front]) {
    out.push(`<rect x="${x}" y="${y - 10}" width="12" height="12" fill="${s.colour}"/>`);
    out.push(`<text x="${x + 16}" y="${y}">${esc(s.label)}</text>`);
    x += 28 + s.label.length * 7;
  }
  return out;
}

export function barChart(c: BarChart): string {
  const plotWidth = WIDTH - LEFT - RIGHT;
  const binWidth = plotWidth / Math.max(1, c.bins);
  const all = (p: Panel, i: number) => Math.max(stackTotal(p.back, i), stackTotal(p.front, i));
  let peak = c.guide?.value ?? 0;
  for (const p of c.panels) for (let i = 0; i < c.bins; i++) peak = Math.max(peak, all(p, i));
  const yMax = niceMax(peak);
  const scale = PANEL_HEIGHT / yMax;
  const height = TOP + c.panels.length * (PANEL_HEIGHT + PANEL_GAP) + 24;
  const out = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${height}" viewBox="0 0 ${WIDTH} ${height}" font-family="sans-serif" font-size="12">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="10" y="20" font-size="14" font-weight="bold">${esc(c.title)}</text>`,
    `<text x="10" y="38" fill="#555">${esc(c.subtitle)}</text>`,
    ...legend(c.panels[0], 58),
  ];
  c.panels.forEach((p, k) => {
    const top = TOP + k * (PANEL_HEIGHT + PANEL_GAP) + 16;
    const base = top + PANEL_HEIGHT;
    out.push(`<text x="${LEFT}" y="${top - 4}" font-weight="bold">${esc(p.title)}</text>`);
    out.push(`<text x="${LEFT - 6}" y="${base}" text-anchor="end" fill="#555">0</text>`);
    out.push(`<text x="${LEFT - 6}" y="${top + 8}" text-anchor="end" fill="#555">${yMax}</text>`);
    for (let i = 0; i < c.bins; i++) {
      const at = { x: LEFT + i * binWidth, w: Math.max(0.5, binWidth - 1), base, scale };
      out.push(...stackRects(p.back, i, at), ...stackRects(p.front, i, at));
    }
    for (const t of c.ticks) {
      const x = n(LEFT + t.bin * binWidth);
      out.push(`<line x1="${x}" y1="${top}" x2="${x}" y2="${base}" stroke="#bbb" stroke-width="0.5"/>`);
    }
    if (c.guide !== undefined) {
      const y = n(base - c.guide.value * scale);
      out.push(`<line x1="${LEFT}" y1="${y}" x2="${LEFT + plotWidth}" y2="${y}" stroke="#333" stroke-dasharray="4 3"/>`);
    }
    out.push(`<line x1="${LEFT}" y1="${base}" x2="${LEFT + plotWidth}" y2="${base}" stroke="#333"/>`);
  });
  const last = TOP + c.panels.length * (PANEL_HEIGHT + PANEL_GAP) + 2;
  for (const t of c.ticks) out.push(`<text x="${n(LEFT + t.bin * binWidth)}" y="${last}" text-anchor="middle" fill="#555">${esc(t.label)}</text>`);
  const notes = [c.yLabel, c.guide === undefined ? '' : `dashed: ${c.guide.label}`].filter((s) => s !== '').join('; ');
  out.push(`<text x="${WIDTH - RIGHT}" y="${last + 18}" text-anchor="end" fill="#555">${esc(notes)}</text>`);
  out.push('</svg>');
  return out.join('\n') + '\n';
}
