/**
 * When to check a grant next: a per-grant interval with jitter, and whether a check made
 * elsewhere (by another verifier instance, before the grant moved here) is fresh enough to skip
 * one. Pure.
 */
import { MAX_TIMER_MS, parseDuration, parseTimerDuration, type Grant } from "@mesh/shared";

/** The default interval when neither `MESH_VERIFY_INTERVAL` nor the requirement says one. */
export const DEFAULT_VERIFY_INTERVAL_MS = 10_000;

/**
 * Jitter below the interval: each wait is the interval times a factor in [1 - JITTER, 1), never
 * longer than the interval, so that drift is seen within one interval (and the check's time).
 */
export const JITTER = 0.1;

/**
 * A check younger than this share of the interval is fresh: a scheduled or event-triggered
 * check of the same basis is skipped. Below `1 - JITTER`, so an instance never skips the check
 * its own timer asks for after its own last check.
 */
export const FRESH_SHARE = 0.8;

/** The interval of the global setting (`MESH_VERIFY_INTERVAL`), or the default; throws saying the accepted forms. */
export function globalInterval(env: NodeJS.ProcessEnv = process.env): number {
  const text = env.MESH_VERIFY_INTERVAL;
  if (text === undefined || text.trim() === "") return DEFAULT_VERIFY_INTERVAL_MS;
  const ms = parseTimerDuration(text, "MESH_VERIFY_INTERVAL");
  if (ms <= 0) throw new Error(`MESH_VERIFY_INTERVAL must be longer than 0 (got ${JSON.stringify(text)})`);
  return ms;
}

/** The interval of a grant: its requirement's `verify.every`, else `defaultMs`. */
export function intervalOf(grant: Pick<Grant, "verify">, defaultMs: number): number {
  const every = grant.verify?.every;
  if (!every) return defaultMs;
  try {
    const ms = parseDuration(every);
    // A grant stored before verify.every was bounded: clamped, never a timer that fires at once.
    return ms > 0 ? Math.min(ms, MAX_TIMER_MS) : defaultMs;
  } catch {
    return defaultMs;
  }
}

/** `intervalMs` with jitter; `random` in [0, 1). */
export function jittered(intervalMs: number, random: number): number {
  return Math.floor(intervalMs * (1 - JITTER + JITTER * random));
}

/**
 * Milliseconds until the next check of a grant last checked at `checkedAt` (ISO; undefined:
 * never), never negative. A grant never checked is due at once.
 */
export function dueIn(intervalMs: number, checkedAt: string | undefined, now: number, random: number): number {
  if (!checkedAt) return 0;
  const t = Date.parse(checkedAt);
  if (Number.isNaN(t)) return 0;
  return Math.max(0, t + jittered(intervalMs, random) - now);
}

/** Whether a check made at `checkedAt` is recent enough to skip another one now. */
export function isFresh(checkedAt: string | undefined, intervalMs: number, now: number): boolean {
  if (!checkedAt) return false;
  const t = Date.parse(checkedAt);
  return !Number.isNaN(t) && now - t >= 0 && now - t < intervalMs * FRESH_SHARE;
}
