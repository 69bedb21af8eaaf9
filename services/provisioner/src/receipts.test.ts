import { describe, expect, it } from "vitest";
import { deliveryMsgId, envDigest, getCondition, withDeliveredCondition, type DeliveryReceipt, type Grant } from "@mesh/shared";
import { grantFixture } from "../../../test/fixtures.js";
import { clearHookFailure, foldReceipt, recordDeliveryFailure, recordHolder, recordHookFailure } from "./receipts.js";

const now = new Date("2030-01-01T00:00:00Z");
const grant = grantFixture;
const held = (generation: number) => ({ "node-a/api": { generation, deliveredAt: now.toISOString() } });
// shop/db at generation 2, rotating to 3; the hook of node-a's api is not allowed there.
const hook = {
  rotation: "shop/db#3",
  generation: 3,
  failed: {
    reason: "HookNotAllowed" as const,
    message: 'the part\'s onRotate names hook "reload", which the agent of node node-a does not allow',
    at: now.toISOString(),
  },
};

describe("recordHolder", () => {
  it("records the holder and sets Delivered once every target holds the generation", () => {
    const g1 = recordHolder(grant(), "node-a", "api", 2, now)!;
    expect(g1.holders["node-a/api"]).toEqual({ generation: 2, deliveredAt: now.toISOString() });
    expect(getCondition(g1.conditions, "Delivered")).toMatchObject({ status: "False", reason: "AwaitingDelivery" });
    const g2 = recordHolder(g1, "node-b", "worker", 2, now)!;
    expect(getCondition(g2.conditions, "Delivered")).toMatchObject({ status: "True", reason: "Delivered" });
  });

  it("writes nothing when already recorded, newer, not a target, or the grant is gone", () => {
    expect(recordHolder(grant({ holders: held(2) }), "node-a", "api", 2, now)).toBeUndefined();
    expect(recordHolder(grant({ holders: held(3) }), "node-a", "api", 2, now)).toBeUndefined();
    expect(recordHolder(grant(), "node-z", "api", 2, now)).toBeUndefined();
    expect(recordHolder(undefined, "node-a", "api", 2, now)).toBeUndefined();
  });

  it("records the env its env file was written with, at the same generation too, and Delivered waits for it", () => {
    const mapped = grant({ env: { DATABASE_URL: "uri" }, holders: held(2), targets: [{ part: "api", node: "node-a" }] });
    expect(
      getCondition(recordHolder(grant({ holders: held(1), targets: [{ part: "api", node: "node-a" }] }), "node-a", "api", 2, now)!.conditions, "Delivered")
        ?.status,
    ).toBe("True");
    const digest = envDigest({ DATABASE_URL: "uri" });
    const g = recordHolder(mapped, "node-a", "api", 2, now, digest)!;
    expect(g.holders["node-a/api"]).toEqual({ generation: 2, deliveredAt: now.toISOString(), env: digest });
    expect(getCondition(g.conditions, "Delivered")).toMatchObject({ status: "True" });
    expect(recordHolder(g, "node-a", "api", 2, now, digest)).toBeUndefined();
    // Held with another env than the grant's: not delivered, and the message says what it waits for.
    const stale = recordHolder({ ...g, env: { URL: "uri" } }, "node-a", "api", 2, now, digest);
    expect(stale).toBeUndefined();
    const waiting = withDeliveredCondition({ ...g, env: { URL: "uri" } }, now);
    expect(getCondition(waiting, "Delivered")).toMatchObject({
      status: "False",
      message: "waiting for the agent of node node-a (part api) to write the env file for the requirement's changed env",
    });
    // An older generation's receipt never records an env over the newer one's.
    expect(recordHolder(g, "node-a", "api", 1, now, "")).toBeUndefined();
  });

  it("records a generation written again after the node lost it, once, and Delivered says so", () => {
    const one = grant({ holders: held(2), targets: [{ part: "api", node: "node-a" }] });
    const at = "2030-01-01T00:00:05.000Z";
    const g = recordHolder(one, "node-a", "api", 2, now, "", at)!;
    expect(g.holders["node-a/api"]).toEqual({ generation: 2, deliveredAt: now.toISOString(), restoredAt: at });
    expect(getCondition(g.conditions, "Delivered")?.message).toBe(
      `generation 2 delivered to api@node-a (written again, the node having lost it: api@node-a at ${at})`,
    );
    expect(recordHolder(g, "node-a", "api", 2, now, "", at)).toBeUndefined();
    // Through the receipt: only a restore of the generation it holds counts.
    const r: DeliveryReceipt = { generation: 2, deliveredAt: now.toISOString(), restored: { generation: 2, at } };
    expect(foldReceipt(one, "node-a", "api", r, now)?.holders["node-a/api"]?.restoredAt).toBe(at);
    expect(foldReceipt(one, "node-a", "api", { ...r, restored: { generation: 1, at } }, now)).toBeUndefined();
  });

  it("puts the env in a delivery's message id, so a changed one is delivered again", () => {
    const g = grant({ env: { DATABASE_URL: "uri" } });
    expect(deliveryMsgId(g, "node-a", "api")).not.toBe(deliveryMsgId(grant(), "node-a", "api"));
    expect(deliveryMsgId(g, "node-a", "api")).not.toBe(deliveryMsgId(grant({ env: { URL: "uri" } }), "node-a", "api"));
    expect(deliveryMsgId(grant({ env: {} }), "node-a", "api")).toBe(deliveryMsgId(grant(), "node-a", "api"));
  });
});

describe("recordDeliveryFailure", () => {
  it("sets Delivered False/DeliveryFailed once", () => {
    const g = recordDeliveryFailure(grant(), "node-a", "api", 2, "the sealed reply did not open", now)!;
    const c = getCondition(g.conditions, "Delivered");
    expect(c).toMatchObject({ status: "False", reason: "DeliveryFailed" });
    expect(c!.message).toContain("node-a");
    expect(c!.message).toContain("api");
    expect(recordDeliveryFailure(g, "node-a", "api", 2, "the sealed reply did not open", now)).toBeUndefined();
    expect(recordDeliveryFailure(undefined, "node-a", "api", 2, "x", now)).toBeUndefined();
    expect(recordDeliveryFailure(grant(), "node-z", "api", 2, "x", now)).toBeUndefined();
    expect(recordDeliveryFailure(grant(), "node-a", "api", 1, "x", now)).toBeUndefined();
  });
});

describe("recordHookFailure and clearHookFailure", () => {
  const rotating = (): Grant =>
    grantFixture({
      conditions: [
        {
          type: "Rotating",
          status: "True",
          reason: "AwaitingHolders",
          message: "rotation shop/db#3: generation 2 → 3 (Broadcast), waiting for 2 holders to confirm",
          observedAt: now.toISOString(),
        },
      ],
    });

  it("says on the grant which holder the rotation waits for and why, once", () => {
    const g = recordHookFailure(rotating(), "node-a", "api", hook, now)!;
    expect(getCondition(g.conditions, "Rotating")).toMatchObject({
      status: "True",
      reason: "HookNotAllowed",
      message: `rotation shop/db#3 waits for node-a/api: ${hook.failed.message}`,
    });
    expect(recordHookFailure(g, "node-a", "api", hook, now)).toBeUndefined();
  });

  it("writes nothing for a grant gone, a rotation committed, or a part that is not its target", () => {
    expect(recordHookFailure(undefined, "node-a", "api", hook, now)).toBeUndefined();
    expect(recordHookFailure(grantFixture({ generation: 3 }), "node-a", "api", hook, now)).toBeUndefined();
    expect(recordHookFailure(rotating(), "node-z", "api", hook, now)).toBeUndefined();
  });

  it("puts Rotating back to AwaitingHolders once that holder confirmed, and leaves anything else alone", () => {
    const failed = recordHookFailure(rotating(), "node-a", "api", hook, now)!;
    const cleared = clearHookFailure(failed, "node-a", "api", "shop/db#3", now)!;
    expect(getCondition(cleared.conditions, "Rotating")).toMatchObject({ status: "True", reason: "AwaitingHolders" });
    expect(getCondition(cleared.conditions, "Rotating")!.message).toContain("node-a/api confirmed once its hook ran");
    expect(clearHookFailure(failed, "node-b", "worker", "shop/db#3", now)).toBeUndefined();
    expect(clearHookFailure(failed, "node-a", "api", "shop/db#4", now)).toBeUndefined();
    expect(clearHookFailure(rotating(), "node-a", "api", "shop/db#3", now)).toBeUndefined();
    expect(clearHookFailure(undefined, "node-a", "api", "shop/db#3", now)).toBeUndefined();
  });
});

describe("foldReceipt", () => {
  const receipt = (r: Partial<DeliveryReceipt>): DeliveryReceipt => ({ generation: 2, deliveredAt: now.toISOString(), ...r });
  const rotating = (): Grant =>
    grant({
      conditions: [
        {
          type: "Rotating",
          status: "True",
          reason: "AwaitingHolders",
          message: "rotation shop/db#3: generation 2 → 3 (Broadcast)",
          observedAt: now.toISOString(),
        },
      ],
    });

  it("records what the receipt's holder holds, once", () => {
    const g = foldReceipt(grant(), "node-a", "api", receipt({}), now)!;
    expect(g.holders["node-a/api"]).toEqual({ generation: 2, deliveredAt: now.toISOString() });
    expect(foldReceipt(g, "node-a", "api", receipt({}), now)).toBeUndefined();
  });

  it("touches only its own holder: a receipt of a part that is not the grant's target on that node changes nothing", () => {
    expect(foldReceipt(grant(), "node-b", "api", receipt({}), now)).toBeUndefined();
    expect(foldReceipt(undefined, "node-a", "api", receipt({}), now)).toBeUndefined();
  });

  it("a failure past the generation held shows as DeliveryFailed; one the holder has since got past says nothing", () => {
    const failed = foldReceipt(
      grant({ holders: held(1) }),
      "node-a",
      "api",
      receipt({ generation: 1, failure: { generation: 2, message: "the sealed reply did not open", at: now.toISOString() } }),
      now,
    )!;
    expect(getCondition(failed.conditions, "Delivered")).toMatchObject({ status: "False", reason: "DeliveryFailed" });
    expect(
      foldReceipt(
        grant({ holders: held(2) }),
        "node-a",
        "api",
        receipt({ generation: 2, failure: { generation: 2, message: "x", at: now.toISOString() } }),
        now,
      ),
    ).toBeUndefined();
  });

  it("a hook's failure shows on Rotating while the rotation runs, and goes once the receipt says the hook ran", () => {
    const failed = foldReceipt(rotating(), "node-a", "api", receipt({ hook }), now)!;
    expect(getCondition(failed.conditions, "Rotating")).toMatchObject({ reason: "HookNotAllowed" });
    expect(getCondition(failed.conditions, "Rotating")!.message).toContain("waits for node-a/api");
    const ran = foldReceipt(failed, "node-a", "api", receipt({ hook: { rotation: hook.rotation, generation: 3 } }), now)!;
    expect(getCondition(ran.conditions, "Rotating")).toMatchObject({ reason: "AwaitingHolders" });
    // After the commit the failure says nothing any more.
    expect(foldReceipt(grant({ generation: 3, holders: held(3) }), "node-a", "api", receipt({ generation: 3, hook }), now)).toBeUndefined();
  });
});

describe("a withdrawn holder", () => {
  it("leaves the holders with its withdrawal's time, which goes once it holds the grant again, and makes its next delivery no repeat", () => {
    const before = grantFixture({ holders: held(2), targets: [{ part: "worker", node: "node-b" }], createdAt: "c1" });
    const gone = foldReceipt(before, "node-a", "api", { generation: 0, withdrawnAt: "w1" }, now)!;
    expect(gone.holders).toEqual({});
    expect(gone.withdrawn).toEqual({ "node-a/api": "w1" });
    const back = { ...gone, targets: [...gone.targets, { part: "api", node: "node-a" }] };
    expect(deliveryMsgId(back, "node-a", "api")).not.toBe(deliveryMsgId(before, "node-a", "api"));
    expect(deliveryMsgId(grantFixture({ createdAt: "c2" }), "node-a", "api")).not.toBe(deliveryMsgId(grantFixture({ createdAt: "c1" }), "node-a", "api"));
    const held2 = recordHolder(back, "node-a", "api", 2, now)!;
    expect(held2.withdrawn).toBeUndefined();
  });
});
