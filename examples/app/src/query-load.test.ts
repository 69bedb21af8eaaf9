import { describe, expect, it } from "vitest";
import { startLoad } from "./query-load.js";

describe("startLoad", () => {
  it("counts successes by generation and failures, and lets the queries it started settle at stop()", async () => {
    let n = 0;
    let release: (() => void) | undefined;
    const held = new Promise<void>((r) => (release = r));
    const load = startLoad(async () => {
      n++;
      if (n === 3) throw new Error("terminated");
      if (n === 4) await held;
      return { generation: n < 3 ? 1 : 2 };
    }, 1);
    await new Promise<void>((r) => {
      const t = setInterval(() => n >= 5 && (clearInterval(t), r()), 1);
    });
    const stopped = load.stop();
    release!();
    await stopped;
    expect(load.inFlight).toBe(0);
    expect(load.counts.failed).toBe(1);
    expect(load.counts.lastError).toBe("terminated");
    expect(load.counts.ok).toBe(n - 1);
    expect(load.counts.byGeneration[1]).toBe(2);
    expect(load.counts.byGeneration[2]).toBe(n - 3);
  });
});
