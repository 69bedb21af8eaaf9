import { describe, expect, it } from "vitest";
import { ErrorCodes, MeshError } from "@mesh/shared";
import { CliError } from "./cli-error.js";
import { ExitCodes } from "./exit-codes.js";
import { bufferOutput } from "./output.js";
import { getEventListeners } from "node:events";
import { isRetryable, pause, retryPolicy, retrying } from "./retry.js";

const noResponders = Object.assign(new Error("503"), { name: "NoRespondersError" });

describe("isRetryable", () => {
  it.each<[string, unknown, boolean]>([
    ["a CliError marked retryable", new CliError("no rotator answers", ExitCodes.ServiceUnavailable, { retryable: true }), true],
    ["a CliError not marked", new CliError("no such grant", ExitCodes.NotFound), false],
    ["a retryable MeshError", new MeshError(ErrorCodes.Unavailable, "later", { retryable: true }), true],
    ["a terminal MeshError", new MeshError(ErrorCodes.InvalidRequest, "bad"), false],
    ["the client's JetStream gap", Object.assign(new Error("jetstream is not enabled"), { name: "JetStreamNotEnabled" }), true],
    ["no responders", noResponders, true],
    ["anything else", new Error("EACCES"), false],
  ])("%s: %s", (_, e, expected) => {
    expect(isRetryable(e)).toBe(expected);
  });
});

describe("retrying", () => {
  it("sends again what is retryable until it succeeds, telling each attempt under verbose", async () => {
    const out = bufferOutput();
    let n = 0;
    // No jitter (random 0): the pauses are the formula's own, 250 ms doubling.
    const v = await retrying("apply", retryPolicy({ withinMs: 5_000, verbose: true, random: () => 0 }, out), async () => {
      if (++n < 3) throw new CliError("no resolver answers", ExitCodes.Failure, { retryable: true });
      return "stored";
    });
    expect(v).toBe("stored");
    expect(n).toBe(3);
    expect(out.stderr.trim().split("\n")).toEqual([
      "meshctl: apply: attempt 1 failed: no resolver answers; trying again in 250 ms",
      "meshctl: apply: attempt 2 failed: no resolver answers; trying again in 500 ms",
    ]);
  });

  it("without verbose says once that it is trying again, and how long for", async () => {
    const out = bufferOutput();
    let n = 0;
    await retrying("rotate", retryPolicy({ withinMs: 5_000 }, out), async () => {
      if (++n < 3) throw new CliError("no rotator answers at nats://x", ExitCodes.ServiceUnavailable, { retryable: true });
    });
    expect(out.stderr.trim().split("\n")).toEqual([
      "meshctl: rotate: no rotator answers at nats://x; trying again for up to 5 s (--timeout; --verbose shows each attempt)",
    ]);
  });

  it("names no option where the command has none (up)", async () => {
    const out = bufferOutput();
    const e = (await retrying("apply", retryPolicy({ withinMs: 600, option: null }, out), async () => {
      throw new CliError("no resolver answers", ExitCodes.Failure, { retryable: true });
    }).catch((err: unknown) => err)) as CliError;
    expect(out.stderr).toBe("meshctl: apply: no resolver answers; trying again for up to 0.6 s\n");
    expect(e.message).toMatch(/^no resolver answers\n\(tried \d+ times over [\d.]+ s\)$/);
  });

  it("throws what is not retryable at once, as it is", async () => {
    const out = bufferOutput();
    const refusal = new CliError("grant x/y does not exist", ExitCodes.NotFound);
    let n = 0;
    const e = await retrying("rotate", retryPolicy({ withinMs: 5_000 }, out), async () => {
      n++;
      throw refusal;
    }).catch((err: unknown) => err);
    expect(e).toBe(refusal);
    expect(n).toBe(1);
    expect(out.stderr).toBe("");
  });

  it("uses the deadline, then throws the last error with how long it tried, keeping its exit code", async () => {
    const out = bufferOutput();
    const start = Date.now();
    let n = 0;
    const e = (await retrying("rotate", retryPolicy({ withinMs: 1_200 }, out), async () => {
      n++;
      throw new CliError("no rotator answers", ExitCodes.ServiceUnavailable, { retryable: true });
    }).catch((err: unknown) => err)) as CliError;
    const took = Date.now() - start;
    expect(took).toBeGreaterThanOrEqual(1_000);
    expect(n).toBeGreaterThanOrEqual(3);
    expect(e.exitCode).toBe(ExitCodes.ServiceUnavailable);
    expect(e.message).toMatch(new RegExp(`^no rotator answers\\n\\(tried ${n} times over 1(\\.\\d)? s; --timeout gives it longer\\)$`));
  });
});

describe("retrying's last word", () => {
  it("is the failure of the last attempt that had a second or more, not of one squeezed into the deadline's end", async () => {
    const policy = retryPolicy({ withinMs: 1_500 }, bufferOutput());
    const e = (await retrying("rotate", policy, async () => {
      // In the deadline's last second a request has too little time to hear even "no responders".
      if (policy.deadline - Date.now() < 1_000) throw new CliError("the rotator did not answer within 0 s", ExitCodes.ServiceUnavailable, { retryable: true });
      throw new CliError("no rotator answers", ExitCodes.ServiceUnavailable, { retryable: true });
    }).catch((err: unknown) => err)) as CliError;
    expect(e.message).toMatch(/^no rotator answers\n\(tried \d+ times/);
  });
});

describe("pause", () => {
  // meshctl up waits for the resolver in 250 ms pauses on one signal; each pause that left its
  // listener behind made Node warn of a leak (MaxListenersExceededWarning) in up's output.
  it("leaves no abort listener behind, and ends at once when the signal aborts", async () => {
    const quit = new AbortController();
    for (let i = 0; i < 20; i++) await pause(1, quit.signal);
    expect(getEventListeners(quit.signal, "abort")).toHaveLength(0);
    const waiting = pause(60_000, quit.signal);
    expect(getEventListeners(quit.signal, "abort")).toHaveLength(1);
    quit.abort();
    await expect(waiting).resolves.toBeUndefined();
    await expect(pause(60_000, quit.signal)).resolves.toBeUndefined();
  });
});
