/** The store's gauges from its records: every grant counted once per condition, the oldest generation per kind, pending holders, agents' ages. */
import { describe, expect, it } from "vitest";
import { storeGauges, summarizeGrant } from "./store-gauges.js";

const at = (s: number) => new Date(Date.parse("2026-12-06T00:00:00Z") + s * 1000).toISOString();
const now = Date.parse("2026-12-06T00:00:00Z") + 100_000;

describe("summarizeGrant", () => {
  it("keeps the kind, provider, conditions, whether it rotates, and when its current generation first reached a holder", () => {
    const s = summarizeGrant({
      kind: "secret",
      provider: "builtin-secret",
      generation: 2,
      holders: {
        "node-a/api": { generation: 2, deliveredAt: at(50) },
        "node-b/api": { generation: 2, deliveredAt: at(40) },
        "node-c/x": { generation: 1, deliveredAt: at(1) },
      },
      conditions: [
        { type: "Provisioned", status: "True", reason: "Provisioned", message: "m" },
        { type: "Rotating", status: "True", reason: "AwaitingHolders", message: "m" },
      ],
    });
    expect(s).toEqual({
      kind: "secret",
      provider: "builtin-secret",
      conditions: [
        { type: "Provisioned", status: "True" },
        { type: "Rotating", status: "True" },
      ],
      deliveredAt: Date.parse(at(40)),
      rotating: true,
    });
    expect(summarizeGrant({ nothing: 1 })).toBeUndefined();
    expect(summarizeGrant(null)).toBeUndefined();
    expect(summarizeGrant({ kind: "secret", provider: null, generation: 0, conditions: "x" })).toEqual({
      kind: "secret",
      provider: null,
      conditions: [],
      rotating: false,
    });
  });
});

describe("storeGauges", () => {
  it("counts grants by kind, provider and condition, modules by state, pending holders by kind, and ages", () => {
    const grant = (kind: string, provider: string | null, statuses: string[], deliveredAt?: number) => ({
      kind,
      provider,
      conditions: statuses.map((status, i) => ({ type: ["Resolved", "Provisioned"][i]!, status })),
      ...(deliveredAt !== undefined ? { deliveredAt } : {}),
      rotating: false,
    });
    const g = storeGauges({
      grants: [
        grant("secret", "builtin-secret", ["True", "True"], Date.parse(at(10))),
        grant("secret", "builtin-secret", ["True", "True"], Date.parse(at(60))),
        grant("secret", "builtin-secret", ["True", "False"]),
        grant("postgres.database", null, ["False"]),
        grant("redis.user", "r", []),
      ],
      modules: [{ state: "Ready" }, { state: "Ready" }, { state: "Pending" }],
      nodes: [
        { node: "node-a", seenAt: at(95) },
        { node: "node-b", seenAt: "not a time" },
      ],
      pending: [
        { kind: "secret", holders: 3 },
        { kind: "secret", holders: 2 },
      ],
      now,
    });
    const value = (rows: typeof g.grants, attrs: Record<string, string>) =>
      rows?.find((r) => Object.entries(attrs).every(([k, v]) => r.attributes[k] === v))?.value;
    expect(value(g.grants, { "mesh.kind": "secret", "mesh.condition": "Provisioned", "mesh.status": "True" })).toBe(2);
    expect(value(g.grants, { "mesh.kind": "secret", "mesh.condition": "Provisioned", "mesh.status": "False" })).toBe(1);
    expect(value(g.grants, { "mesh.kind": "secret", "mesh.condition": "Resolved", "mesh.status": "True" })).toBe(3);
    expect(value(g.grants, { "mesh.kind": "postgres.database", "mesh.provider": "none", "mesh.status": "False" })).toBe(1);
    // A grant with no condition yet is still counted.
    expect(value(g.grants, { "mesh.kind": "redis.user", "mesh.condition": "none" })).toBe(1);
    expect(value(g.modules, { "mesh.state": "Ready" })).toBe(2);
    expect(value(g.modules, { "mesh.state": "Pending" })).toBe(1);
    expect(g.holdersPending).toEqual([{ value: 5, attributes: { "mesh.kind": "secret" } }]);
    expect(g.credentialAge).toEqual([{ value: 90, attributes: { "mesh.kind": "secret" } }]);
    expect(g.agentReportAge).toEqual([{ value: 5, attributes: { "mesh.node": "node-a" } }]);
  });
});
