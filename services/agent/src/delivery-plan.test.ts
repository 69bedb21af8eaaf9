import { describe, expect, it } from "vitest";
import { envDigest, type Delivery, type Grant } from "@mesh/shared";
import { grantFixture } from "../../../test/fixtures.js";
import { planDelivery } from "./delivery-plan.js";

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
const heldWithEnv = (generation: number, env: Record<string, string>) => ({
  "node-a/api": { generation, deliveredAt: now.toISOString(), env: envDigest(env) },
});

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
    ["recorded and on disk, with the grant's env", delivery(2), grant({ env: { URL: "uri" }, holders: heldWithEnv(2, { URL: "uri" }) }), 2, "skip"],
    [
      "recorded and on disk, the grant's env changed since",
      delivery(2),
      grant({ env: { DATABASE_URL: "uri" }, holders: heldWithEnv(2, { URL: "uri" }) }),
      2,
      "record",
    ],
    ["recorded and on disk, the grant's env removed since", delivery(2), grant({ holders: heldWithEnv(2, { URL: "uri" }) }), 2, "record"],
    ["on disk but not recorded (crash between)", delivery(2), grant({ holders: held(1) }), 2, "record"],
    ["recorded but the files are gone", delivery(2), grant({ holders: held(2) }), undefined, "apply"],
    ["newer than the grant says", delivery(3), grant(), 2, "apply"],
    ["the grant's generation, come back after a rotation wrote the next", delivery(2), grant({ holders: held(2) }), 3, "skip"],
    ["the grant's generation, first time, after a rotation wrote the next", delivery(2), grant(), 3, "skip"],
    ["a former grant's binding far ahead of a grant made again", delivery(2), grant(), 7, "apply"],
  ])("%s → %s", (_name, d, g, local, action) => {
    expect(planDelivery(d, g, local).action).toBe(action);
  });
});
