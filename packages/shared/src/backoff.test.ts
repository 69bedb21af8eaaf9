import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { backoffMs, confirmFailure } from "./backoff.js";

describe("backoffMs", () => {
  it("doubles from the first wait up to the cap, exactly when there is no jitter", () => {
    const b = { firstMs: 100, maxMs: 1_000, jitter: 0 };
    expect([0, 1, 2, 3, 4, 5, 50, 10_000].map((n) => backoffMs(n, b))).toEqual([100, 100, 200, 400, 800, 1_000, 1_000, 1_000]);
  });

  it("takes a random share of each wait: half of it by default, between half and all of the wait", () => {
    const b = { firstMs: 1_000, maxMs: 8_000 };
    expect(backoffMs(3, b, () => 0)).toBe(4_000);
    expect(backoffMs(3, b, () => 0.999_999)).toBe(2_000);
    expect(backoffMs(3, { ...b, jitter: 1 }, () => 0.5)).toBe(2_000);
  });

  it("stays within [full × (1 − jitter), full] for any attempt and jitter, and spreads processes that failed together", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: -5, max: 10_000 }),
        fc.double({ min: 0, max: 1, noNaN: true }),
        fc.double({ min: 0, max: 0.999_999, noNaN: true }),
        (attempt, jitter, r) => {
          const b = { firstMs: 50, maxMs: 30_000, jitter };
          const full = Math.min(30_000, 50 * 2 ** Math.min(Math.max(attempt - 1, 0), 52));
          const ms = backoffMs(attempt, b, () => r);
          return Number.isFinite(ms) && ms <= full && ms >= Math.floor(full * (1 - jitter));
        },
      ),
    );
    // A thousand holders retrying their fifth attempt at once do not all wait the same time.
    const waits = new Set(Array.from({ length: 1_000 }, () => backoffMs(5, { firstMs: 250, maxMs: 10_000 })));
    expect(waits.size).toBeGreaterThan(100);
  });
});

describe("confirmFailure", () => {
  const attempts = (...outcomes: boolean[]) => {
    let n = 0;
    return { run: () => Promise.resolve(outcomes[n++]!), count: () => n };
  };
  const failed = (ok: boolean) => !ok;

  it("takes a success at once, and a failure not to be confirmed at once", async () => {
    const ok = attempts(true, false);
    expect(await confirmFailure(ok.run, failed, true, 0)).toBe(true);
    expect(ok.count()).toBe(1);
    const known = attempts(false, true);
    expect(await confirmFailure(known.run, failed, false, 0)).toBe(false);
    expect(known.count()).toBe(1);
  });

  it("tries a new failure once more after the pause, and returns what that second attempt says", async () => {
    const passing = attempts(false, true);
    const started = Date.now();
    expect(await confirmFailure(passing.run, failed, true, 30)).toBe(true);
    expect(passing.count()).toBe(2);
    expect(Date.now() - started).toBeGreaterThanOrEqual(25);
    const down = attempts(false, false, true);
    expect(await confirmFailure(down.run, failed, true, 0)).toBe(false);
    expect(down.count()).toBe(2);
  });
});
