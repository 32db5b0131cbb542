// Tests that count admissions within one fixed window must not straddle its end: wait, if need
// be, until the next window has begun. Day windows make the wait rare (near midnight UTC only).
export const DAY_MS = 86_400_000;

export async function awayFromWindowEdge(periodMs: number, needMs: number): Promise<void> {
  const into = Date.now() % periodMs;
  if (into > periodMs - needMs) await new Promise((r) => setTimeout(r, periodMs - into + 50));
}
