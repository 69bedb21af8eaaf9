import { describe, expect, it } from "vitest";
import { JetStreamApiError } from "@nats-io/jetstream";
import {
  isJetStreamGap,
  isJetStreamTimeout,
  isStoreCreateFailure,
  jetStreamTimeoutMessage,
  jetStreamUnavailable,
  retryJetStreamIdempotent,
} from "./jetstream-retry.js";

describe("isJetStreamGap", () => {
  it("knows the gap in each of the words 2.9.10 says it with, and nothing else", () => {
    for (const m of [
      "503 no responders available",
      "jetstream is not enabled",
      "JetStream not enabled for account",
      "JetStream system temporarily unavailable",
    ])
      expect(isJetStreamGap(new Error(m)), m).toBe(true);
    for (const m of ["stream not found", "wrong last sequence: 3", 'Permissions Violation for Publish to "$JS.API.INFO"'])
      expect(isJetStreamGap(new Error(m)), m).toBe(false);
  });
});

describe("jetStreamUnavailable", () => {
  const timeout = () => Object.assign(new Error("timeout"), { name: "TimeoutError" });
  const noLeader = new JetStreamApiError({ code: 503, err_code: 10008, description: "JetStream system temporarily unavailable" });
  const noAccount = new JetStreamApiError({ code: 503, err_code: 10039, description: "JetStream not enabled for account" });
  const silent = new Error("jetstream is not enabled", { cause: new Error("503") });
  const one = { jetstream: true };
  const member = { jetstream: true, cluster: "mesh" };

  it("tells a cluster without a leader from a server or an account without JetStream, and from one server not answering", () => {
    // A member that knows it has no meta leader says so, whatever else it said of itself.
    expect(jetStreamUnavailable(noLeader, member)).toBe("cluster-electing");
    expect(jetStreamUnavailable(new Error("opening the store failed", { cause: noLeader }), member)).toBe("cluster-electing");
    expect(jetStreamUnavailable(noAccount, one)).toBe("account-without-jetstream");
    // Silence: what the server said of itself in its INFO decides.
    expect(jetStreamUnavailable(silent, { jetstream: false })).toBe("server-without-jetstream");
    expect(jetStreamUnavailable(silent, {})).toBe("server-without-jetstream");
    expect(jetStreamUnavailable(silent, one)).toBe("no-answer");
    expect(jetStreamUnavailable(silent, member)).toBe("cluster-electing");
    expect(jetStreamUnavailable(timeout(), one)).toBe("no-answer");
    expect(jetStreamUnavailable(new Error("listing the keys failed", { cause: timeout() }), member)).toBe("cluster-electing");
    expect(jetStreamUnavailable(timeout(), undefined)).toBe("no-answer");
  });

  it("is undefined for what says something else", () => {
    for (const m of ["stream not found", "wrong last sequence: 3", 'Permissions Violation for Publish to "$JS.API.INFO"'])
      expect(jetStreamUnavailable(new Error(m), member), m).toBeUndefined();
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
