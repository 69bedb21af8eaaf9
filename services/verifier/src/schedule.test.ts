import { describe, expect, it } from "vitest";
import { DEFAULT_VERIFY_INTERVAL_MS, FRESH_SHARE, JITTER, dueIn, globalInterval, intervalOf, isFresh, jittered } from "./schedule.js";

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

describe("jitter", () => {
  it("stays within JITTER below the interval, never past it", () => {
    expect(jittered(10_000, 0)).toBe(10_000 * (1 - JITTER));
    expect(jittered(10_000, 0.5)).toBe(10_000 * (1 - JITTER / 2));
    expect(jittered(10_000, 0.999999)).toBeLessThan(10_000);
  });
  it("spreads grants checked together", () => {
    const waits = new Set(Array.from({ length: 50 }, (_, i) => jittered(10_000, i / 50)));
    expect(waits.size).toBe(50);
  });
});

describe("dueIn and isFresh", () => {
  const now = Date.parse("2026-01-01T00:00:10.000Z");
  it("is due at once when never checked", () => {
    expect(dueIn(10_000, undefined, now, 0.5)).toBe(0);
  });
  it("counts from the last check, never negative", () => {
    expect(dueIn(10_000, "2026-01-01T00:00:05.000Z", now, 0.5)).toBe(4_500);
    expect(dueIn(10_000, "2025-12-31T00:00:00.000Z", now, 0.5)).toBe(0);
  });
  it("a check younger than FRESH_SHARE of the interval is fresh", () => {
    expect(isFresh("2026-01-01T00:00:05.000Z", 10_000, now)).toBe(true);
    expect(isFresh(new Date(now - 10_000 * FRESH_SHARE).toISOString(), 10_000, now)).toBe(false);
    expect(isFresh(undefined, 10_000, now)).toBe(false);
    // A check "from the future" (clock skew between instances) is not trusted.
    expect(isFresh("2026-01-01T00:00:20.000Z", 10_000, now)).toBe(false);
  });
  it("an instance's own timer never finds its own last check fresh", () => {
    const checkedAt = new Date(now).toISOString();
    const earliest = now + jittered(10_000, 0);
    expect(isFresh(checkedAt, 10_000, earliest)).toBe(false);
  });
});
