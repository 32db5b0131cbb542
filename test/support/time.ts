// Tests that count admissions within one fixed window must not straddle its end: wait, if need
// be, until the next window has begun. Day windows make the wait rare (near midnight UTC only).
export const DAY_MS = 86_400_000;

export async function awayFromWindowEdge(periodMs: number, needMs: number): Promise<void> {
  const into = Date.now() % periodMs;
  if (into > periodMs - needMs) await new Promise((r) => setTimeout(r, periodMs - into + 50));
}

// Waits, if need be, until the clock is at least `marginMs` past the start of a second and as far
// from its end: what is measured in whole seconds then reads the same anywhere within that margin.
export async function clearOfSecondEdge(marginMs: number): Promise<void> {
  const into = Date.now() % 1000;
  if (into < marginMs) await new Promise((r) => setTimeout(r, marginMs - into));
  else if (into > 1000 - marginMs) await new Promise((r) => setTimeout(r, 1000 - into + marginMs));
}
