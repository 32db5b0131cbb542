// "Did you mean" for config errors: the valid word closest to a misspelt one, when close enough.

// Optimal string alignment distance: insertions, deletions, substitutions and swaps of two
// neighbours each cost 1 ("rquests" and "reqeusts" are both one typo away from "requests").
export function editDistance(a: string, b: string): number {
  const d: number[][] = Array.from({ length: a.length + 1 }, (_, i) => [i, ...Array<number>(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) d[0][j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      d[i][j] = Math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d[i][j] = Math.min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.length][b.length];
}

// Case, '-', '_' and spaces are the most common slips (`requestsPerUnit`, `requests-per-unit`).
function normalize(word: string): string {
  return word.toLowerCase().replace(/[-_\s]/g, '');
}

// The closest candidate within a third of the word's length (at least 2 edits), or undefined.
export function closest(word: string, candidates: Iterable<string>): string | undefined {
  const w = normalize(word);
  let best: string | undefined;
  let bestDistance = Infinity;
  for (const c of candidates) {
    const distance = editDistance(w, normalize(c));
    if (distance < bestDistance) {
      best = c;
      bestDistance = distance;
    }
  }
  const allowed = Math.max(2, Math.floor(word.length / 3));
  return bestDistance <= allowed && best !== word ? best : undefined;
}

// " (did you mean 'x'?)" or '' when nothing is close.
export function didYouMean(word: string, candidates: Iterable<string>): string {
  const c = closest(word, candidates);
  return c === undefined ? '' : ` (did you mean '${c}'?)`;
}

// " (did you mean 'x'? valid: a, b, c)" or " (valid: a, b, c)", for a value that must be one of a list.
export function validChoices(word: string, candidates: readonly string[]): string {
  const c = closest(word, candidates);
  return ` (${c === undefined ? '' : `did you mean '${c}'? `}valid: ${candidates.join(', ')})`;
}
