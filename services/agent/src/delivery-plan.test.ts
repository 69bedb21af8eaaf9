import { describe, expect, it } from "vitest";
import { getCondition, type Delivery, type Grant } from "@mesh/shared";
import { grantFixture } from "../../../test/fixtures.js";
import { planDelivery, recordDeliveryFailure, recordHolder } from "./delivery-plan.js";

const now = new Date("2030-01-01T00:00:00Z");

const grant = grantFixture;

function delivery(generation: number, patch: Partial<Delivery> = {}): Delivery {
  return {
    grant: "shop/db",
    module: "shop",
    requirement: "db",
    part: "api",
    node: "node-a",
    kind: "postgres.database",
    provider: "pg-main",
    generation,
    publishedAt: now.toISOString(),
    ...patch,
  };
}

const held = (generation: number) => ({ "node-a/api": { generation, deliveredAt: now.toISOString() } });

describe("planDelivery", () => {
  it.each<[string, Delivery, Grant | undefined, number | undefined, string]>([
    ["grant gone", delivery(2), undefined, undefined, "ignore"],
    ["part no longer a target", delivery(2), grant({ targets: [{ part: "worker", node: "node-b" }] }), undefined, "ignore"],
    ["same part, other node", delivery(2), grant({ targets: [{ part: "api", node: "node-c" }] }), undefined, "ignore"],
    ["older than the grant", delivery(1), grant(), undefined, "skip"],
    ["older than the grant, even with nothing on disk", delivery(1), grant({ holders: held(0) }), undefined, "skip"],
    ["first delivery", delivery(2), grant(), undefined, "apply"],
    ["new generation over an old one", delivery(2), grant({ holders: held(1) }), 1, "apply"],
    ["recorded and on disk", delivery(2), grant({ holders: held(2) }), 2, "skip"],
    ["on disk but not recorded (crash between)", delivery(2), grant({ holders: held(1) }), 2, "record"],
    ["recorded but the files are gone", delivery(2), grant({ holders: held(2) }), undefined, "apply"],
    ["newer than the grant says", delivery(3), grant(), 2, "apply"],
  ])("%s → %s", (_name, d, g, local, action) => {
    expect(planDelivery(d, g, local).action).toBe(action);
  });
});

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
