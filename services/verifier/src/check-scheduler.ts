/**
 * The verifier's timers: one per grant it checks on its schedule, each placed on the timeline of
 * checks (schedule.ts) so that checks spread out and come before their deadlines by the lead
 * they take now; and the count of checks that came late, told in the log at most once a minute.
 * A timer that fires asks its grant's run through `onDue`; the run places the next one.
 */
import type { Logger } from "@mesh/shared/service";
import { CheckTimeline, LeadEstimator, type Placement } from "./schedule.js";

/** The scheduler's counters, shared with the verifier's stats. */
export interface ScheduleStats {
  late: number;
}

export class CheckScheduler {
  private readonly timers = new Map<string, { timer: NodeJS.Timeout; placed: Placement }>();
  private readonly timeline = new CheckTimeline();
  /** How much earlier than its deadline a check is asked for now, by the checks' lateness. */
  readonly lead = new LeadEstimator();
  /** Late checks not yet told in the log, and the longest gap among them. */
  private readonly lateness = { count: 0, worstMs: 0, toldAt: 0 };
  private stopped = false;

  constructor(
    private readonly defaultIntervalMs: number,
    private readonly log: Logger,
    private readonly stats: ScheduleStats,
    /** A timer fired: run `key`, whose check was due at `dueAt`. */
    private readonly onDue: (key: string, dueAt: number) => void,
  ) {}

  /** Whether `key` has a timer. */
  has(key: string): boolean {
    return this.timers.has(key);
  }

  /** Drops the timer of `key`, if any. */
  cancel(key: string): void {
    const t = this.timers.get(key);
    if (!t) return;
    clearTimeout(t.timer);
    this.timeline.release(t.placed);
    this.timers.delete(key);
  }

  /** Places the next check of `key`, `intervalMs` after its last check (`checkedAt`, epoch ms, if any), on the timeline. */
  next(key: string, intervalMs: number, checkedAt: number | undefined, random: number): void {
    this.at(key, this.timeline.place(intervalMs, checkedAt, Date.now(), this.lead.lead(intervalMs), random));
  }

  /** Checks `key` in `delayMs` (a first check, a retry). */
  after(key: string, delayMs: number): void {
    this.at(key, this.timeline.placeAt(Date.now() + delayMs, this.defaultIntervalMs));
  }

  /** Counts a scheduled check made `gapMs` after the one before, past its interval, and says so in the log at most once a minute. */
  noteLate(gapMs: number, intervalMs: number): void {
    this.stats.late++;
    const l = this.lateness;
    l.count++;
    l.worstMs = Math.max(l.worstMs, gapMs);
    const now = Date.now();
    if (now - l.toldAt < 60_000) return;
    this.log.warn(
      { late: l.count, worstGapMs: l.worstMs, intervalMs, leadMs: Math.round(this.lead.lead(intervalMs)) },
      `${l.count} grant check(s) came later than their interval (${intervalMs} ms) after the check before, the latest ${l.worstMs} ms after: this verifier is past what it and its providers can check in an interval; run another verifier instance (they split the grants), or set a longer verify.every or MESH_VERIFY_INTERVAL`,
    );
    Object.assign(l, { count: 0, worstMs: 0, toldAt: now });
  }

  /** Drops every timer; none is placed from now on. */
  stop(): void {
    this.stopped = true;
    for (const key of [...this.timers.keys()]) this.cancel(key);
  }

  private at(key: string, placed: Placement): void {
    if (this.stopped) return this.timeline.release(placed);
    this.cancel(key);
    const timer = setTimeout(
      () => {
        this.timers.delete(key);
        this.timeline.release(placed);
        this.onDue(key, placed.at);
      },
      Math.max(0, placed.at - Date.now()),
    );
    timer.unref();
    this.timers.set(key, { timer, placed });
  }
}
