import { describe, expect, it } from "vitest";
import { grantChangeLines, moduleChangeLines } from "./live-status.js";
import { cond, grant, moduleStatus } from "./test-fixtures.js";

describe("moduleChangeLines", () => {
  it("prints a module when its state or message moves, and nothing otherwise", () => {
    const before = moduleStatus();
    expect(moduleChangeLines(undefined, before)).toEqual(["shop Pending: waiting for db"]);
    expect(moduleChangeLines(before, { ...before, processedAt: "later" })).toEqual([]);
    expect(moduleChangeLines(before, { ...before, state: "Ready", message: "all requirements are satisfied" })).toEqual([
      "shop Ready: all requirements are satisfied",
    ]);
    expect(moduleChangeLines(before, undefined)).toEqual(["shop removed"]);
    expect(moduleChangeLines(undefined, undefined)).toEqual([]);
  });
});

describe("grantChangeLines", () => {
  const resolved = cond("Resolved", "True", "ProviderSelected", "provider pg-main (node node-a)");
  const g0 = grant({ requirement: "db", conditions: [resolved] });

  it("prints one line per condition that moved", () => {
    expect(grantChangeLines(undefined, g0)).toEqual(["shop/db Resolved=True ProviderSelected: provider pg-main (node node-a)"]);
    const g1 = { ...g0, generation: 1, conditions: [resolved, cond("Provisioned", "True", "Provisioned", "generation 1")] };
    expect(grantChangeLines(g0, g1)).toEqual(["shop/db Provisioned=True Provisioned: generation 1"]);
    // Same conditions with a new observedAt: nothing to say.
    expect(grantChangeLines(g1, { ...g1, conditions: g1.conditions.map((c) => ({ ...c, observedAt: "now" })) })).toEqual([]);
  });

  it("prints cleared conditions, a bare generation change and removal", () => {
    const g1 = { ...g0, conditions: [resolved, cond("Delivered", "False", "AwaitingDelivery", "x")] };
    expect(grantChangeLines(g1, g0)).toEqual(["shop/db Delivered cleared"]);
    expect(grantChangeLines(g0, { ...g0, generation: 2 })).toEqual(["shop/db generation 2"]);
    expect(grantChangeLines(g0, undefined)).toEqual(["shop/db removed"]);
  });
});
