import { describe, expect, it } from "vitest";
import { PoolSwap } from "./pool-swap.js";

/** A pool that records when it was ended, and a query on it that settles when the test says. */
function fakePool(name: string, log: string[]) {
  return { name, end: async () => void log.push(`end ${name}`) };
}
function deferred() {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

describe("PoolSwap", () => {
  it("sends new queries to the swapped-in pool at once, and ends the old one only after its running queries settle", async () => {
    const log: string[] = [];
    const [a, b] = [fakePool("a", log), fakePool("b", log)];
    const swap = new PoolSwap({ pool: a, generation: 1 });
    const slow = deferred();
    const onOld = swap.use(async ({ pool }) => (await slow.promise, pool.name));
    expect(swap.runningOn(a)).toBe(1);

    const swapped = swap.swap({ pool: b, generation: 2 });
    expect(swap.inUse).toEqual({ pool: b, generation: 2 });
    await expect(swap.use(async ({ pool }) => pool.name)).resolves.toEqual({ result: "b", generation: 2 });
    // Still running on a: a is not ended yet.
    await Promise.resolve();
    expect(log).toEqual([]);

    log.push("old query settles");
    slow.resolve();
    await expect(onOld).resolves.toEqual({ result: "a", generation: 1 });
    await swapped;
    expect(log).toEqual(["old query settles", "end a"]);
    expect(swap.runningOn(a)).toBe(0);
  });

  it("counts a failed query as settled too", async () => {
    const log: string[] = [];
    const [a, b] = [fakePool("a", log), fakePool("b", log)];
    const swap = new PoolSwap({ pool: a, generation: 1 });
    const failing = deferred();
    const q = swap.use(async () => {
      await failing.promise;
      throw new Error("connection reset");
    });
    const swapped = swap.swap({ pool: b, generation: 2 });
    failing.resolve();
    await expect(q).rejects.toThrow("connection reset");
    await swapped;
    expect(log).toEqual(["end a"]);
  });

  it("ends an idle old pool at once, and the current one at end()", async () => {
    const log: string[] = [];
    const [a, b] = [fakePool("a", log), fakePool("b", log)];
    const swap = new PoolSwap({ pool: a, generation: 1 });
    await swap.use(async () => 1);
    await swap.swap({ pool: b, generation: 2 });
    expect(log).toEqual(["end a"]);
    await swap.end();
    expect(log).toEqual(["end a", "end b"]);
  });
});
