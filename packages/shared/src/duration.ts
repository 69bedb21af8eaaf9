import { MAX_TIMER_MS } from "./limits.js";

/** Durations as users write them: `500ms`, `10s`, `5m`, `2h`, `30d`. */
const UNITS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };
export const DURATION_PATTERN = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)$/;

/** Milliseconds of a duration string; throws with the accepted forms when it is not one. */
export function parseDuration(text: string): number {
  const m = DURATION_PATTERN.exec(text.trim());
  if (!m) throw new Error(`not a duration: ${JSON.stringify(text)} (use a number and a unit: 500ms, 10s, 5m, 2h, 30d)`);
  return Math.round(Number(m[1]) * UNITS[m[2]!]!);
}

/**
 * Milliseconds of a duration that becomes a timer; past {@link MAX_TIMER_MS} (2^31−1 ms, about
 * 24.8 days, where Node fires a timer at once) it is refused, as is anything that is not a
 * duration. `what` names it in the message (`MESH_VERIFY_INTERVAL`, `--timeout`).
 */
export function parseTimerDuration(text: string, what: string): number {
  let ms: number;
  try {
    ms = parseDuration(text);
  } catch (e) {
    throw new Error(`${what}: ${(e as Error).message}`, { cause: e });
  }
  if (ms > MAX_TIMER_MS) throw new Error(`${what}: ${JSON.stringify(text)} is too long; a timer may be at most ${MAX_TIMER_MS}ms (about 24 days)`);
  return ms;
}

/** Whether `text` is a duration of at most `maxMs` (a schema refinement: a malformed one is left to the pattern). */
export function durationAtMost(text: string, maxMs: number): boolean {
  try {
    return parseDuration(text) <= maxMs;
  } catch {
    return true;
  }
}

/** A short human form of an age in milliseconds: `3 s`, `4 min`, `2 h`, `5 d`. */
export function formatAge(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  if (s < 172800) return `${Math.round(s / 3600)} h`;
  return `${Math.round(s / 86400)} d`;
}
