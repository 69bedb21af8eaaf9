import { describe, expect, it } from "vitest";
import { isJetStreamGap } from "./nats.js";

describe("isJetStreamGap", () => {
  it("knows the gap in each of the words 2.9.10 says it with, and nothing else", () => {
    for (const m of ["503 no responders available", "jetstream is not enabled", "JetStream not enabled for account"]) expect(isJetStreamGap(new Error(m)), m).toBe(true);
    for (const m of ["stream not found", "wrong last sequence: 3", "Permissions Violation for Publish to \"$JS.API.INFO\""]) expect(isJetStreamGap(new Error(m)), m).toBe(false);
  });
});
