/**
 * When to check a grant next: before its deadline (its last check plus its interval) by the
 * time checks are taking now, where the verifier's other checks leave room; and whether a check
 * made elsewhere (by another verifier instance, before the grant moved here) is fresh enough to
 * skip one. Pure.
 */
import { MAX_TIMER_MS, parseDuration, parseTimerDuration, type Grant } from "@mesh/shared";

/** The default interval when neither `MESH_VERIFY_INTERVAL` nor the requirement says one. */
export const DEFAULT_VERIFY_INTERVAL_MS = 10_000;

/**
 * The share of the interval before its end in which a grant's next check is placed: never
 * earlier than `1 - WINDOW` of the interval after its last check, never later than the
 * interval less the lead (see {@link LeadEstimator}).
 */
export const WINDOW = 0.18;

/**
 * A check younger than this share of the interval is fresh: a scheduled or event-triggered
 * check of the same basis is skipped. Below `1 - WINDOW`, so an instance never skips the check
 * its own timeline placed after its own last check.
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

/**
 * How much earlier than its deadline (last check + interval) a grant's check must be asked for
 * so that it is made by then: the time from a timer's firing to the check's result (the wait in
 * the verifier's queue, the store's reads, the login) grows with the load, and a check asked
 * for at its deadline is late by all of it. The lead is the 99th percentile of the last
 * {@link LEAD_SAMPLES} such times plus {@link LEAD_MARGIN_MS}, never more than
 * {@link LEAD_MAX_SHARE} of an interval: beyond that the verifier is past its capacity, asking
 * earlier only adds checks, and the rest of the window is left for spreading the checks out.
 */
export class LeadEstimator {
  private readonly samples: number[] = [];
  private next = 0;
  private cached: number | undefined;

  /** Records one time from a timer's firing to its check's result, in ms. */
  add(ms: number): void {
    if (!Number.isFinite(ms) || ms < 0) return;
    if (this.samples.length < LEAD_SAMPLES) this.samples.push(ms);
    else this.samples[this.next] = ms;
    this.next = (this.next + 1) % LEAD_SAMPLES;
    this.cached = undefined;
  }

  /** The lead for a grant of `intervalMs`. */
  lead(intervalMs: number): number {
    // Nothing measured yet (a start, where the first checks are often a backlog): the most.
    if (this.samples.length === 0) return intervalMs * LEAD_MAX_SHARE;
    if (this.cached === undefined) {
      const sorted = [...this.samples].sort((a, b) => a - b);
      const p99 = sorted[Math.min(sorted.length - 1, Math.ceil(sorted.length * 0.99) - 1)]!;
      this.cached = p99 + LEAD_MARGIN_MS;
    }
    return Math.min(this.cached, intervalMs * LEAD_MAX_SHARE);
  }
}

/** How many recent checks the lead is measured over. */
export const LEAD_SAMPLES = 512;
/** The most of an interval the lead may take. */
export const LEAD_MAX_SHARE = 0.1;
/** Added to the measured 99th percentile (timer lateness, a check slower than the ones seen). */
export const LEAD_MARGIN_MS = 50;

/** Where a grant's next check was placed on a {@link CheckTimeline}, to release it. */
export interface Placement {
  /** Epoch ms the check is due at. */
  at: number;
  /** The grant's interval, whose checks per ms the placement counts. */
  intervalMs: number;
}

/**
 * The next checks of the grants one verifier owns, counted per bucket of time, so that each is
 * placed where the load is light: within the window before its deadline, in the latest bucket
 * not already fuller than the instance's mean rate asks for (the emptiest when all are). A
 * verifier that checked every grant at once (at start, or after an outage) would otherwise keep
 * them packed into the few seconds that pass took, every interval after, running at its
 * capacity there and idle elsewhere; placed this way they spread over the interval within a few
 * intervals, and a grant is never placed past its deadline less the lead. Pure: the caller sets
 * the timers and releases each placement when its timer fires or is cleared.
 */
export class CheckTimeline {
  private readonly counts = new Map<number, number>();
  /** Checks per ms that the placed grants ask for (the sum of 1 / interval). */
  private rate = 0;

  constructor(readonly bucketMs = 100) {}

  /**
   * Places the next check of a grant of `intervalMs` last checked at `checkedAt` (epoch ms;
   * undefined: never, so due now). `random` in [0, 1) picks the moment within the bucket.
   */
  place(intervalMs: number, checkedAt: number | undefined, now: number, leadMs: number, random: number): Placement {
    let at: number;
    if (checkedAt === undefined || Number.isNaN(checkedAt)) {
      at = now;
    } else {
      const earliest = checkedAt + intervalMs * (1 - WINDOW);
      const latest = Math.max(earliest, checkedAt + intervalMs - leadMs);
      if (latest <= now) {
        at = now;
      } else {
        const lo = Math.max(earliest, now);
        // The buckets with a moment in [lo, latest): the last is the one just before latest.
        const first = this.bucketOf(lo);
        const last = Math.max(first, Math.ceil(latest / this.bucketMs) - 1);
        // What one bucket holds when the placed grants are spread evenly (this one included).
        const even = Math.max(1, Math.round((this.rate + 1 / intervalMs) * this.bucketMs));
        let chosen = last;
        let fewest = Infinity;
        for (let b = last; b >= first; b--) {
          const n = this.counts.get(b) ?? 0;
          if (n < even) {
            chosen = b;
            break;
          }
          if (n < fewest) [fewest, chosen] = [n, b];
        }
        const start = Math.max(lo, chosen * this.bucketMs);
        const end = Math.min(latest, (chosen + 1) * this.bucketMs);
        at = start + (end - start) * random;
      }
    }
    return this.placeAt(at, intervalMs);
  }

  /** Places a check of a grant of `intervalMs` at `at` (epoch ms) itself: a retry, or a first check spread over a start. */
  placeAt(at: number, intervalMs: number): Placement {
    const bucket = this.bucketOf(at);
    this.counts.set(bucket, (this.counts.get(bucket) ?? 0) + 1);
    this.rate += 1 / intervalMs;
    return { at, intervalMs };
  }

  /** Forgets a placement (its timer fired, or was cleared). */
  release(p: Placement): void {
    const bucket = this.bucketOf(p.at);
    const n = (this.counts.get(bucket) ?? 0) - 1;
    if (n > 0) this.counts.set(bucket, n);
    else this.counts.delete(bucket);
    this.rate = Math.max(0, this.rate - 1 / p.intervalMs);
  }

  /** The bucket that moment `at` (epoch ms) falls in. */
  private bucketOf(at: number): number {
    return Math.floor(at / this.bucketMs);
  }

  /** How many placements are held (for tests). */
  get size(): number {
    let n = 0;
    for (const c of this.counts.values()) n += c;
    return n;
  }
}

/** Whether a check made at `checkedAt` is recent enough to skip another one now. */
export function isFresh(checkedAt: string | undefined, intervalMs: number, now: number): boolean {
  if (!checkedAt) return false;
  const t = Date.parse(checkedAt);
  return !Number.isNaN(t) && now - t >= 0 && now - t < intervalMs * FRESH_SHARE;
}
