import { describe, expect, it } from "vitest";
import type { RepairEvent, Verification } from "@mesh/shared";
import { formatStatus } from "./status-format.js";
import { buildStatusReport } from "./status-report.js";
import { formatVerify } from "./verify-command.js";
import { NOW, ago, cond, grant, moduleStatus } from "./test-fixtures.js";

const verification: Verification = {
  grant: "shop/db",
  basis: "b",
  checkedAt: ago(7),
  checkedBy: "verifier@host/1",
  verifier: { ok: true, message: "generation 1 logs in at provider pg-main from the verifier", generation: 1, observedAt: ago(7) },
  probes: { "node-a/api": { ok: true, message: "m", generation: 1, observedAt: ago(3), intervalMs: 10_000 } },
};
const repair: RepairEvent = {
  at: ago(90),
  by: "verifier@host/1",
  action: "recreate",
  reason: "ResourceMissing",
  generation: 1,
  outcome: "repaired",
  message: "ResourceMissing: its role is missing — re-created the resource with generation 1's credential",
  requested: false,
};
const db = grant({
  requirement: "db",
  generation: 1,
  holders: { "node-a/api": { generation: 1, deliveredAt: ago(100) } },
  repairs: [repair],
  conditions: [cond("Verified", "True", "Verified", "generation 1 logs in at provider pg-main from the verifier and from node node-a (api)", 600)],
});

describe("status with the verifier's record", () => {
  it("shows Verified with the age of the last check and where it came from, and the repairs", () => {
    const report = buildStatusReport([moduleStatus({ state: "Ready" })], [db], [], new Map([["shop/db", verification]]), NOW);
    const g = report.modules[0]!.grants[0]!;
    expect(g.verification).toMatchObject({ lastCheckedAt: ago(3), lastCheckedFrom: "node-a", checkedAt: ago(7), checkedBy: "verifier@host/1" });
    expect(g.repairs).toEqual([repair]);
    const text = formatStatus(report, { now: NOW });
    expect(text).toMatch(/Verified +True +Verified +verified 3 s ago from node-a/);
    expect(text).toContain("repairs");
    expect(text).toContain("90 s ago repaired by verifier@host/1: ResourceMissing: its role is missing");
  });
  it("without a record, shows the age of the condition as for any other", () => {
    const text = formatStatus(buildStatusReport([moduleStatus({ state: "Ready" })], [{ ...db, repairs: [] }]), { now: NOW });
    expect(text).toMatch(/Verified +True +Verified +10 min ago/);
    expect(text).not.toContain("repairs");
  });
});

describe("formatVerify", () => {
  it("prints the condition, where it was checked from, and a repair made now", () => {
    const text = formatVerify(
      { ok: true, grant: "shop/db", condition: cond("Verified", "True", "Verified", "generation 1 logs in", 0), verification, repair },
      { now: NOW },
    );
    const lines = text.split("\n");
    expect(lines.slice(0, 4)).toEqual([
      "shop/db  Verified True  Verified",
      "  generation 1 logs in",
      "  verified 3 s ago from node-a",
      "  node node-a (part api): logs in, generation 1, 3 s ago",
    ]);
    expect(lines.slice(4).join(" ").replace(/\s+/g, " ")).toBe(
      " repaired: ResourceMissing: its role is missing — re-created the resource with generation 1's credential (by verifier@host/1)",
    );
    expect(lines.every((l) => l.length <= 80)).toBe(true);
  });
});
