import { describe, expect, it } from "vitest";
import { JetStreamApiError } from "@nats-io/jetstream";
import { isJetStreamGap, isJetStreamTimeout, isStoreCreateFailure, jetStreamTimeoutMessage, retryJetStreamIdempotent } from "./jetstream-retry.js";

describe("isJetStreamGap", () => {
  it("knows the gap in each of the words 2.9.10 says it with, and nothing else", () => {
    for (const m of ["503 no responders available", "jetstream is not enabled", "JetStream not enabled for account"])
      expect(isJetStreamGap(new Error(m)), m).toBe(true);
    for (const m of ["stream not found", "wrong last sequence: 3", 'Permissions Violation for Publish to "$JS.API.INFO"'])
      expect(isJetStreamGap(new Error(m)), m).toBe(false);
  });
});

describe("isJetStreamTimeout", () => {
  const timeout = () => Object.assign(new Error("timeout"), { name: "TimeoutError" });
  it("knows the client's timeout, also as the cause of another error, and nothing else", () => {
    expect(isJetStreamTimeout(timeout())).toBe(true);
    expect(isJetStreamTimeout(new Error("opening the watch failed", { cause: timeout() }))).toBe(true);
    for (const m of ["stream not found", "the rotator did not answer within 10 s", "503 no responders available"])
      expect(isJetStreamTimeout(new Error(m)), m).toBe(false);
  });
  it("is told to the user as what happened and what to do", () => {
    const m = jetStreamTimeoutMessage("meshctl rotate", "nats://a:4222,nats://b:4222");
    expect(m).toContain("JetStream at nats://a:4222,nats://b:4222 did not answer in time");
    expect(m).toMatch(/elect new leaders/);
    expect(m).toMatch(/Try again in a few seconds/);
  });
  it("is ridden out by a read until it answers, and thrown once the time is up", async () => {
    let calls = 0;
    await expect(retryJetStreamIdempotent(async () => (++calls < 3 ? Promise.reject(timeout()) : "read"), 5_000)).resolves.toBe("read");
    expect(calls).toBe(3);
    await expect(retryJetStreamIdempotent(() => Promise.reject(timeout()), 150)).rejects.toThrow("timeout");
    await expect(retryJetStreamIdempotent(() => Promise.reject(new Error("stream not found")), 5_000)).rejects.toThrow("stream not found");
  });
});

describe("isStoreCreateFailure", () => {
  it("knows JetStream's 'error creating store for stream', which a forming cluster may answer, from other refusals", () => {
    const failed = new JetStreamApiError({ code: 500, err_code: 10049, description: "error creating store for stream" });
    expect(isStoreCreateFailure(failed)).toBe(true);
    expect(isStoreCreateFailure(new JetStreamApiError({ code: 400, err_code: 10058, description: "stream name already in use" }))).toBe(false);
    expect(isStoreCreateFailure(new Error("error creating store for stream"))).toBe(false);
  });
});
