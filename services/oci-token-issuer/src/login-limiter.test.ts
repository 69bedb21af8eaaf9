import { describe, expect, it } from "vitest";
import { DEFAULT_LOGIN_LIMITS, FailureWindows, LoginLimiter } from "./login-limiter.js";

const limits = { perAddress: 3, perUser: 2, windowMs: 60_000, maxTracked: 100 };

/** `n` failed logins of `attempt`, each at `at`. */
function fail(l: LoginLimiter, attempt: { address: string; user?: string }, n: number, at: number): void {
  for (let i = 0; i < n; i++) l.recordFailure(attempt, at);
}

describe("LoginLimiter", () => {
  it("defaults to 10 failures a minute per address and 5 per user", () => {
    expect(new LoginLimiter().limits).toEqual({ perAddress: 10, perUser: 5, windowMs: 60_000, maxTracked: 10_000 });
    expect(DEFAULT_LOGIN_LIMITS).toEqual(new LoginLimiter().limits);
  });

  it("locks an address at its limit until the window from its first failure ends, then lets it try again", () => {
    const l = new LoginLimiter(limits);
    const a = { address: "10.0.0.1" };
    l.recordFailure(a, 1_000);
    fail(l, a, 1, 20_000);
    expect(l.lockOf(a, 20_000)).toBeUndefined();
    fail(l, a, 1, 30_000);
    expect(l.lockOf(a, 30_000)).toEqual({ by: "address", failures: 3, retryAfterMs: 31_000 });
    expect(l.lockOf(a, 60_999)).toEqual({ by: "address", failures: 3, retryAfterMs: 1 });
    expect(l.lockOf(a, 61_000)).toBeUndefined();
    // A new window: its count starts again.
    fail(l, a, 2, 61_000);
    expect(l.lockOf(a, 61_000)).toBeUndefined();
  });

  it("locks a user at its limit from every address, and an address for every user", () => {
    const l = new LoginLimiter(limits);
    l.recordFailure({ address: "10.0.0.1", user: "shop.images" }, 0);
    l.recordFailure({ address: "10.0.0.2", user: "shop.images" }, 0);
    expect(l.lockOf({ address: "10.0.0.3", user: "shop.images" }, 5_000)).toEqual({ by: "user", failures: 2, retryAfterMs: 55_000 });
    expect(l.lockOf({ address: "10.0.0.3", user: "blog.images" }, 5_000)).toBeUndefined();
    fail(l, { address: "10.0.0.9", user: "a.b" }, 1, 0);
    fail(l, { address: "10.0.0.9", user: "c.d" }, 1, 0);
    fail(l, { address: "10.0.0.9" }, 1, 0);
    expect(l.lockOf({ address: "10.0.0.9", user: "e.f" }, 0)).toMatchObject({ by: "address", failures: 3 });
  });

  it("names the longer lock when both the address and the user are locked", () => {
    const l = new LoginLimiter(limits);
    fail(l, { address: "10.0.0.1", user: "shop.images" }, 2, 0);
    fail(l, { address: "10.0.0.1" }, 1, 10_000);
    expect(l.lockOf({ address: "10.0.0.1", user: "shop.images" }, 10_000)).toEqual({ by: "address", failures: 3, retryAfterMs: 50_000 });
    const m = new LoginLimiter(limits);
    fail(m, { address: "10.0.0.1" }, 3, 0);
    fail(m, { address: "10.0.0.2", user: "shop.images" }, 2, 10_000);
    expect(m.lockOf({ address: "10.0.0.1", user: "shop.images" }, 10_000)).toEqual({ by: "user", failures: 2, retryAfterMs: 60_000 });
  });

  it.each([
    [{ perAddress: 0 }, /perAddress must be a whole number from 1, not 0/],
    [{ perUser: 1.5 }, /perUser must be a whole number from 1, not 1\.5/],
    [{ windowMs: -1 }, /windowMs/],
    [{ maxTracked: Number.NaN }, /maxTracked/],
  ])("refuses limits %o", (given, message) => {
    expect(() => new LoginLimiter(given)).toThrow(message);
  });
});

describe("FailureWindows, bounded", () => {
  it("keeps at most maxTracked keys however many addresses fail, forgetting ended windows first", () => {
    const w = new FailureWindows(60_000, 1_000);
    for (let i = 0; i < 5_000; i++) w.record(`10.0.${i >> 8}.${i & 255}`, i);
    expect(w.size).toBe(1_000);
    // The newest are kept, the oldest forgotten.
    expect(w.count("10.0.19.135", 5_000).failures).toBe(1); // i = 4999
    expect(w.count("10.0.0.0", 5_000).failures).toBe(0);
    // Once their windows have ended, a new key finds room without forgetting a running window.
    const later = 4_999 + 60_000;
    w.record("192.0.2.1", later);
    expect(w.size).toBe(1);
    expect(w.count("192.0.2.1", later)).toEqual({ failures: 1, endsInMs: 60_000 });
  });

  it("forgets a key's ended window when it is looked at", () => {
    const w = new FailureWindows(1_000, 10);
    w.record("a", 0);
    expect(w.count("a", 999)).toEqual({ failures: 1, endsInMs: 1 });
    expect(w.count("a", 1_000)).toEqual({ failures: 0, endsInMs: 0 });
    expect(w.size).toBe(0);
  });
});
