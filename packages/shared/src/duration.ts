/** Durations as users write them: `500ms`, `10s`, `5m`, `2h`, `30d`. */
const UNITS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };
export const DURATION_PATTERN = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)$/;

/** Milliseconds of a duration string; throws with the accepted forms when it is not one. */
export function parseDuration(text: string): number {
  const m = DURATION_PATTERN.exec(text.trim());
  if (!m) throw new Error(`not a duration: ${JSON.stringify(text)} (use a number and a unit: 500ms, 10s, 5m, 2h, 30d)`);
  return Math.round(Number(m[1]) * UNITS[m[2]!]!);
}

/** A short human form of an age in milliseconds: `3 s`, `4 min`, `2 h`, `5 d`. */
export function formatAge(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  if (s < 172800) return `${Math.round(s / 3600)} h`;
  return `${Math.round(s / 86400)} d`;
}
