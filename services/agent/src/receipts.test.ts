import { describe, expect, it } from "vitest";
import { RECEIPT_MESSAGE_MAX, DeliveryReceipt } from "@mesh/shared";
import { hookNotAllowed } from "./rotation-confirm.js";
import { receiptConfirmed, receiptDelivered, receiptFailed, receiptHookFailed, receiptRestored } from "./receipts.js";

const now = new Date("2030-01-01T00:00:00Z");
const later = new Date("2030-01-01T00:01:00Z");
const d = { part: "api", rotation: "shop/db#3", generation: 3 };

describe("receiptRestored", () => {
  it("says the generation was written again, delivered now", () => {
    const r = receiptRestored(receiptDelivered(undefined, 2, now), 2, later, "abc");
    expect(r).toEqual({ generation: 2, deliveredAt: later.toISOString(), env: "abc", restored: { generation: 2, at: later.toISOString() } });
  });
});

describe("the agent's receipts", () => {
  it("a delivery is recorded anew each time (so a holder the grant lost is folded in again), never backwards", () => {
    const r1 = receiptDelivered(undefined, 2, now);
    expect(r1).toEqual({ generation: 2, deliveredAt: now.toISOString() });
    expect(receiptDelivered(r1, 2, later).deliveredAt).toBe(later.toISOString());
    expect(receiptDelivered(receiptDelivered(r1, 3, now), 2, later).generation).toBe(3);
  });

  it("a failure is said once, ends when its generation is delivered, and is cut to what a receipt carries", () => {
    const failed = receiptFailed(receiptDelivered(undefined, 1, now), 2, "the sealed reply did not open", now)!;
    expect(failed.failure).toEqual({ generation: 2, message: "the sealed reply did not open", at: now.toISOString() });
    expect(receiptFailed(failed, 2, "the sealed reply did not open", later)).toBeUndefined();
    expect(receiptFailed(receiptDelivered(undefined, 2, now), 2, "x", now)).toBeUndefined();
    expect(receiptDelivered(failed, 2, later).failure).toBeUndefined();
    expect(receiptDelivered(failed, 1, later).failure).toBeDefined();
    const long = receiptFailed(undefined, 2, "x".repeat(RECEIPT_MESSAGE_MAX * 2), now)!;
    expect(DeliveryReceipt.safeParse(long).success).toBe(true);
    expect(long.failure!.message.length).toBe(RECEIPT_MESSAGE_MAX);
  });

  it("a hook's failure is new at each attempt, and is over once the hook ran in that rotation", () => {
    const e = hookNotAllowed("reload", "node-a", d, new Map());
    const f1 = receiptHookFailed(receiptDelivered(undefined, 3, now), d.rotation, 3, e, now);
    expect(f1.hook).toMatchObject({ rotation: d.rotation, generation: 3, failed: { reason: "HookNotAllowed" } });
    expect(receiptHookFailed(f1, d.rotation, 3, e, later)).not.toEqual(f1);
    // Confirmed in another rotation: the failure in this one stands.
    expect(receiptConfirmed(f1, "shop/db#4", 4)!.hook).toEqual(f1.hook);
    expect(receiptConfirmed(f1, d.rotation, 3)!.hook).toEqual({ rotation: d.rotation, generation: 3 });
    expect(DeliveryReceipt.safeParse(f1).success).toBe(true);
  });

  it("a confirmation is witnessed once per rotation and generation, after the part applied it", () => {
    const delivered = receiptDelivered(undefined, 3, now);
    const c = receiptConfirmed(delivered, d.rotation, 3)!;
    expect(c).toEqual({ ...delivered, confirmed: { rotation: d.rotation, generation: 3 } });
    expect(DeliveryReceipt.safeParse(c).success).toBe(true);
    // Written again: nothing to write.
    expect(receiptConfirmed(c, d.rotation, 3)).toBeUndefined();
    // The next rotation replaces it.
    expect(receiptConfirmed(c, "shop/db#9", 4)!.confirmed).toEqual({ rotation: "shop/db#9", generation: 4 });
  });
});
