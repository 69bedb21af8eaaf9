import { describe, expect, it } from "vitest";
import { JetStreamApiError } from "@nats-io/jetstream";
import { firstNatsServer, jetStreamUnavailableError } from "./connect.js";

describe("jetStreamUnavailableError", () => {
  const url = "nats://a:4222";
  const member = { jetstream: true, cluster: "mesh" } as never;
  const one = { jetstream: true } as never;
  const timeout = () => Object.assign(new Error("timeout"), { name: "TimeoutError" });
  const noAccount = new JetStreamApiError({ code: 503, err_code: 10039, description: "JetStream not enabled for account" });

  it("gives each reason its own advice, retryable while it may pass by itself", () => {
    const electing = jetStreamUnavailableError(timeout(), url, member, 0)!;
    expect(electing.message).toContain(`the NATS cluster at ${url} has no JetStream leader to answer now (no answer in time)`);
    expect(electing.retryable).toBe(true);
    const without = jetStreamUnavailableError(new Error("jetstream is not enabled"), url, { jetstream: false } as never, 0)!;
    expect(without.message).toContain("restart the server with -js");
    expect(without.retryable).toBe(false);
    const loaded = jetStreamUnavailableError(timeout(), url, one, 0)!;
    expect(loaded.message).toContain(`JetStream of the NATS server at ${url} did not answer in time`);
    expect(loaded.retryable).toBe(true);
    expect(jetStreamUnavailableError(new Error("stream not found"), url, one, 0)).toBeUndefined();
  });

  it("takes an account without JetStream for a reload for 10 s, then for what it is", () => {
    expect(jetStreamUnavailableError(noAccount, url, one, 9_999)!.retryable).toBe(true);
    const after = jetStreamUnavailableError(noAccount, url, one, 10_000)!;
    expect(after.retryable).toBe(false);
    expect(after.message).toContain("runs JetStream, but not for the account meshctl connected to");
  });
});

describe("firstNatsServer", () => {
  it("is the first server of a URL list, with the default port when none is given; none for what does not parse", () => {
    expect(firstNatsServer("tls://[::1]:4333, tls://b:1")).toEqual({ host: "::1", port: 4333 });
    expect(firstNatsServer("nats-1.example:4223")).toEqual({ host: "nats-1.example", port: 4223 });
    expect(firstNatsServer("127.0.0.1")).toEqual({ host: "127.0.0.1", port: 4222 });
    expect(firstNatsServer("nats://a b")).toBeUndefined();
  });
});
