import { describe, expect, it } from "vitest";
import { deliveryCountOf, holderPullExpiresMs, pullStatusAction } from "./one-pull.js";

describe("pullStatusAction", () => {
  it("pulls again when a pull ended without a message or its leader moved", () => {
    expect(pullStatusAction(408, "Request Timeout")).toBe("pull");
    expect(pullStatusAction(404, "No Messages")).toBe("pull");
    expect(pullStatusAction(409, "Leadership Change")).toBe("pull");
  });
  it("ends the run when the consumer is deleted or nothing answers the subject", () => {
    expect(pullStatusAction(409, "Consumer Deleted")).toBe("deleted");
    expect(pullStatusAction(409, "Consumer is Deleted")).toBe("deleted");
    expect(pullStatusAction(503, "")).toBe("unavailable");
  });
  it("ignores heartbeats and pauses on other refusals", () => {
    expect(pullStatusAction(100, "Idle Heartbeat")).toBe("ignore");
    expect(pullStatusAction(409, "Exceeded MaxWaiting")).toBe("pause");
  });
});

describe("deliveryCountOf", () => {
  it("reads the delivery count of both ack subject layouts", () => {
    expect(deliveryCountOf("$JS.ACK.MESH_HOLD.h1.3.17.5.1733500000000000000.0")).toBe(3);
    expect(deliveryCountOf("$JS.ACK.hub.ACCHASH.MESH_HOLD.h1.2.17.5.1733500000000000000.0.tok")).toBe(2);
  });
  it("says 1 for a subject that is neither", () => {
    expect(deliveryCountOf("_INBOX.abc")).toBe(1);
    expect(deliveryCountOf("$JS.ACK.S.C.x.1.1.1.0")).toBe(1);
  });
});

describe("holderPullExpiresMs", () => {
  it("is short while the consumer is new to the holder and for the first pull after a message, and 30 s otherwise", () => {
    expect(holderPullExpiresMs(1_000, 2_000, false)).toBe(2_000);
    expect(holderPullExpiresMs(3_000, 2_000, true)).toBe(2_000);
    expect(holderPullExpiresMs(3_000, 2_000, false)).toBe(30_000);
  });
});
