import { describe, expect, it } from "vitest";
import { KeyedQueue } from "./keyed-queue.js";

/** A run's work: a few milliseconds in which another run could start, were the queue to let it. */
const work = () => new Promise((r) => setTimeout(r, 5));

describe("KeyedQueue", () => {
  it("never runs one key twice at once, and runs again for adds made during a run", async () => {
    let running = 0;
    let maxRunning = 0;
    let runs = 0;
    // The first run holds until the adds are made: "during a run" by construction, not by timing
    // (a 1 ms and a 5 ms timer once came in the other order on a loaded CI machine).
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    let started!: () => void;
    const firstStarted = new Promise<void>((r) => (started = r));
    const q = new KeyedQueue(async () => {
      running++;
      maxRunning = Math.max(maxRunning, running);
      runs++;
      if (runs === 1) {
        started();
        await held;
      }
      await work();
      running--;
    });
    const first = q.enqueue("k");
    await firstStarted;
    const during = [q.enqueue("k"), q.enqueue("k"), q.enqueue("k")];
    expect(runs).toBe(1);
    release();
    await Promise.all([first, ...during]);
    expect(maxRunning).toBe(1);
    expect(runs).toBe(2); // adds during a run collapse into one more run
    expect(q.size).toBe(0);
  });

  it("bounds concurrency across keys", async () => {
    let running = 0;
    let max = 0;
    const q = new KeyedQueue(async () => {
      running++;
      max = Math.max(max, running);
      await work();
      running--;
    }, 3);
    await Promise.all(Array.from({ length: 20 }, (_, i) => q.enqueue(`k${i}`)));
    expect(max).toBe(3);
  });

  it("rejects the waiters of a failed run and keeps going", async () => {
    let fail = true;
    const q = new KeyedQueue(async () => {
      if (fail) throw new Error("boom");
    });
    await expect(q.enqueue("k")).rejects.toThrow("boom");
    fail = false;
    await expect(q.enqueue("k")).resolves.toBeUndefined();
  });
});
