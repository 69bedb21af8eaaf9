import { describe, expect, it } from "vitest";
import fc from "fast-check";
import {
  CheckTimeline,
  DEFAULT_VERIFY_INTERVAL_MS,
  FRESH_SHARE,
  LEAD_MARGIN_MS,
  LEAD_MAX_SHARE,
  LEAD_SAMPLES,
  LeadEstimator,
  WINDOW,
  globalInterval,
  intervalOf,
  isFresh,
} from "./schedule.js";

describe("intervals", () => {
  it("default, global, per requirement", () => {
    expect(globalInterval({})).toBe(DEFAULT_VERIFY_INTERVAL_MS);
    expect(globalInterval({ MESH_VERIFY_INTERVAL: "2s" })).toBe(2_000);
    expect(globalInterval({ MESH_VERIFY_INTERVAL: "500ms" })).toBe(500);
    expect(() => globalInterval({ MESH_VERIFY_INTERVAL: "soon" })).toThrow(/not a duration/);
    expect(() => globalInterval({ MESH_VERIFY_INTERVAL: "0s" })).toThrow(/longer than 0/);
    expect(intervalOf({}, 2_000)).toBe(2_000);
    expect(intervalOf({ verify: { every: "30s" } }, 2_000)).toBe(30_000);
    expect(intervalOf({ verify: {} }, 2_000)).toBe(2_000);
  });
});

describe("LeadEstimator", () => {
  it("assumes the most until it has measured anything", () => {
    expect(new LeadEstimator().lead(10_000)).toBe(10_000 * LEAD_MAX_SHARE);
  });
  it("is the 99th percentile of the recent checks plus a margin, never past its share of the interval", () => {
    const l = new LeadEstimator();
    for (let i = 1; i <= 100; i++) l.add(i); // 1..100 ms: p99 is 99
    expect(l.lead(10_000)).toBe(99 + LEAD_MARGIN_MS);
    expect(l.lead(500)).toBe(500 * LEAD_MAX_SHARE);
    l.add(Number.NaN);
    l.add(-5);
    expect(l.lead(10_000)).toBe(99 + LEAD_MARGIN_MS);
  });
  it("forgets what is older than its last samples (a backlog at start does not stay in it)", () => {
    const l = new LeadEstimator();
    for (let i = 0; i < LEAD_SAMPLES; i++) l.add(5_000);
    expect(l.lead(10_000)).toBe(10_000 * LEAD_MAX_SHARE);
    for (let i = 0; i < LEAD_SAMPLES; i++) l.add(20);
    expect(l.lead(10_000)).toBe(20 + LEAD_MARGIN_MS);
  });
});

describe("CheckTimeline", () => {
  const I = 10_000;
  it("a grant never checked, or past its deadline less the lead, is due now", () => {
    const t = new CheckTimeline();
    expect(t.place(I, undefined, 50_000, 100, 0.5).at).toBe(50_000);
    expect(t.place(I, 40_000, 50_000, 100, 0.5).at).toBe(50_000);
    expect(t.place(I, 40_100, 50_000, 100, 0.5).at).toBe(50_000);
  });
  it("on an empty timeline, places a check in the last bucket before the deadline less the lead", () => {
    const t = new CheckTimeline(100);
    const p = t.place(I, 0, 0, 250, 0.5);
    expect(p.at).toBeGreaterThanOrEqual(9_700);
    expect(p.at).toBeLessThanOrEqual(I - 250);
  });
  it("passes over a bucket already fuller than an even spread asks for, and releases what fired", () => {
    const t = new CheckTimeline(100);
    // 100 grants of 10 s: an even spread is 1 check per 100 ms bucket.
    const first = t.place(I, 0, 0, 0, 0);
    for (let i = 0; i < 99; i++) t.placeAt(50_000 + i * 100, I);
    const second = t.place(I, 0, 0, 0, 0);
    expect(Math.floor(second.at / 100)).toBe(Math.floor(first.at / 100) - 1);
    t.release(first);
    const third = t.place(I, 0, 0, 0, 0);
    expect(Math.floor(third.at / 100)).toBe(Math.floor(first.at / 100));
    expect(t.size).toBe(101);
  });
  it("when every bucket of the window is full, takes the emptiest (the latest of equals)", () => {
    const t = new CheckTimeline(100);
    for (let b = 82; b < 100; b++) for (let i = 0; i < (b === 90 ? 2 : 3); i++) t.placeAt(b * 100 + 1, I);
    expect(Math.floor(t.place(I, 0, 0, 0, 0.5).at / 100)).toBe(90);
  });
  it("always places within the window: not before (1 - WINDOW) of the interval (so never fresh to its own instance), not after the deadline less the lead", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 100, max: 120_000 }),
        fc.integer({ min: 0, max: 1_000_000 }),
        fc.integer({ min: 0, max: 200_000 }),
        fc.integer({ min: 0, max: 60_000 }),
        fc.double({ min: 0, max: 0.999, noNaN: true }),
        fc.array(fc.integer({ min: 0, max: 1_200_000 }), { maxLength: 300 }),
        (interval, checkedAt, since, leadMs, random, others) => {
          const t = new CheckTimeline();
          for (const at of others) t.placeAt(at, interval);
          const now = checkedAt + since;
          const lead = Math.min(leadMs, interval * LEAD_MAX_SHARE);
          const { at } = t.place(interval, checkedAt, now, lead, random);
          const earliest = checkedAt + interval * (1 - WINDOW);
          const latest = Math.max(earliest, checkedAt + interval - lead);
          if (latest <= now) return at === now;
          return at >= Math.max(now, earliest) && at <= latest && !isFresh(new Date(checkedAt).toISOString(), interval, Math.ceil(at));
        },
      ),
    );
  });

  /**
   * A verifier that checked every grant at once (at its start) sees them come due packed into
   * the seconds that pass took. A discrete-event model of it — 1,000 grants of 10 s, 16 checks
   * at a time, a capacity only 15 % above the 100 checks/s the interval needs, each check's
   * time varying by ±50 % — shows the timeline and the lead keep every gap within the interval
   * from the second interval on; the jitter the verifier used before (a wait of 90–100 % of
   * the interval from the last check) does not.
   */
  function simulate(next: (tl: CheckTimeline, lead: LeadEstimator, doneAt: number, random: () => number) => ReturnType<CheckTimeline["place"]>) {
    let seed = 42;
    const random = () => (seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648) / 2_147_483_648;
    const [N, C, capacity, end] = [1_000, 16, 115, 60_000];
    const service = (C / capacity) * 1_000;
    const tl = new CheckTimeline();
    const lead = new LeadEstimator();
    type Ev = { t: number; done: boolean; g: number; due?: number };
    const events: Ev[] = [];
    const push = (e: Ev) => {
      let lo = 0;
      let hi = events.length;
      while (lo < hi) {
        const mid = (lo + hi) >> 1;
        if (events[mid]!.t <= e.t) lo = mid + 1;
        else hi = mid;
      }
      events.splice(lo, 0, e);
    };
    const placed = Array.from({ length: N }, (_, g) => {
      const p = tl.placeAt(random() * 2_000, I);
      push({ t: p.at, done: false, g });
      return p;
    });
    const last: Array<number | undefined> = [];
    const gaps: Array<{ at: number; gap: number }> = [];
    const queue: Array<{ g: number; due?: number }> = [];
    let busy = 0;
    const start = (now: number) => {
      for (; busy < C && queue.length; busy++) {
        const q = queue.shift()!;
        push({ t: now + service * (0.5 + random()), done: true, g: q.g, ...(q.due !== undefined ? { due: q.due } : {}) });
      }
    };
    while (events.length && events[0]!.t <= end) {
      const e = events.shift()!;
      if (!e.done) {
        tl.release(placed[e.g]!);
        queue.push({ g: e.g, ...(e.due !== undefined ? { due: e.due } : {}) });
      } else {
        busy--;
        if (last[e.g] !== undefined) gaps.push({ at: e.t, gap: e.t - last[e.g]! });
        last[e.g] = e.t;
        if (e.due !== undefined) lead.add(e.t - e.due);
        const p = next(tl, lead, e.t, random);
        placed[e.g] = p;
        push({ t: p.at, done: false, g: e.g, due: p.at });
      }
      start(e.t);
    }
    return gaps.filter((x) => x.at >= 2 * I).map((x) => x.gap);
  }

  it("spreads a packed start so that no grant's gap passes the interval, at a capacity 15 % above the need", () => {
    const gaps = simulate((tl, lead, doneAt, random) => tl.place(I, doneAt, doneAt, lead.lead(I), random()));
    expect(gaps.length).toBeGreaterThan(3_500);
    expect(Math.max(...gaps)).toBeLessThanOrEqual(I);
  });
  it("(the jitter it replaces let a tenth of the gaps pass the interval in the same model)", () => {
    const gaps = simulate((tl, _lead, doneAt, random) => tl.placeAt(doneAt + I * (0.9 + 0.1 * random()), I));
    expect(gaps.filter((g) => g > I).length).toBeGreaterThan(gaps.length / 20);
  });
});

describe("isFresh", () => {
  const now = Date.parse("2026-01-01T00:00:10.000Z");
  it("a check younger than FRESH_SHARE of the interval is fresh", () => {
    expect(isFresh("2026-01-01T00:00:05.000Z", 10_000, now)).toBe(true);
    expect(isFresh(new Date(now - 10_000 * FRESH_SHARE).toISOString(), 10_000, now)).toBe(false);
    expect(isFresh(undefined, 10_000, now)).toBe(false);
    // A check "from the future" (clock skew between instances) is not trusted.
    expect(isFresh("2026-01-01T00:00:20.000Z", 10_000, now)).toBe(false);
  });
});
