/**
 * Records for the CLI's unit tests: grants and module states as the services write them.
 * Not part of the package's public surface.
 */
import type { Condition, Grant, ModuleStatus, NodeRecord, ProviderDoc, Rotation } from "@mesh/shared";
import { grantFixture, postgresProvider } from "../../../test/fixtures.js";

export const NOW = new Date("2025-06-01T12:00:00.000Z");
/** An ISO time `s` seconds before {@link NOW}. */
export const ago = (s: number) => new Date(NOW.getTime() - s * 1000).toISOString();

export function cond(type: Condition["type"], status: Condition["status"], reason: Condition["reason"], message: string, age = 5): Condition {
  return { type, status, reason, message, observedAt: ago(age) };
}

export function grant(over: Partial<Grant> & Pick<Grant, "requirement">): Grant {
  return grantFixture({ id: `shop/${over.requirement}`, parts: ["api"], targets: [{ part: "api", node: "node-a" }], generation: 0, ...over });
}

export function moduleStatus(over: Partial<ModuleStatus> = {}): ModuleStatus {
  return {
    module: "shop",
    state: "Pending",
    message: "waiting for db",
    requirements: 2,
    manifestRevision: 3,
    processedAt: ago(10),
    since: ago(120),
    ...over,
  };
}

export const pgMain: ProviderDoc = { ...postgresProvider("pg-main", "node-a"), admin: { username: "postgres" } };

export const nodeA: NodeRecord = {
  node: "node-a",
  agent: "agent-1",
  bindingsRoot: "/srv/mesh/bindings/node-a",
  startedAt: ago(600),
  seenAt: ago(3),
};

/** A grant provisioned at generation 1 and delivered to api on node-a. */
export const readyDb = grant({
  requirement: "db",
  generation: 1,
  resource: { database: "shop_db", role: "shop_db_a" },
  holders: { "node-a/api": { generation: 1, deliveredAt: ago(30) } },
  conditions: [
    cond("Resolved", "True", "ProviderSelected", "provider pg-main (node node-a)", 60),
    cond("Provisioned", "True", "Provisioned", "database shop_db with role shop_db_a, generation 1", 40),
    cond("Delivered", "True", "Delivered", "generation 1 delivered to api@node-a", 30),
  ],
});

/** A rotation of shop/db from generation 1 to 2, requested a minute before {@link NOW}, awaiting holders: node-a/api confirmed, an SDK instance on node-b not. */
export function rotationFixture(over: Partial<Rotation> = {}): Rotation {
  return {
    id: "shop/db#2",
    grant: "shop/db",
    module: "shop",
    requirement: "db",
    kind: "postgres.database",
    provider: "pg-main",
    from: 1,
    to: 2,
    state: "AwaitingHolders",
    requestedAt: ago(60),
    deadline: ago(30),
    holders: { "node-a/api": { r: 12, a: 140, c: 151 }, "node-b/worker/i-1": { r: 20 } },
    broadcasts: [],
    resource: {},
    history: [
      { state: "Staged", at: ago(60) },
      { state: "AwaitingHolders", at: ago(59.99) },
    ],
    trigger: "manual",
    ...over,
  };
}
