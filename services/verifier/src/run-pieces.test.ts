/** The pure pieces of a verifier's run: merging requests, deciding to check, the next record, a report's subject. */
import { describe, expect, it } from "vitest";
import { subjects, type CheckResult, type Condition, type ProbeReport, type ProbeResult, type Verification } from "@mesh/shared";
import { grantFixture } from "../../../test/fixtures.js";
import { decideRun } from "./decide.js";
import { verificationBasis } from "./fold.js";
import { reportedGrantKey } from "./probes.js";
import { nextRecord } from "./record.js";
import { mergeRun } from "./run-request.js";

const now = Date.parse("2026-01-01T00:01:00.000Z");
const at = (secondsAgo: number) => new Date(now - secondsAgo * 1000).toISOString();
const condition = (type: Condition["type"], status: "True" | "False"): Condition => ({
  type,
  status,
  reason: "Provisioned" as Condition["reason"],
  message: "",
  observedAt: at(60),
});
const provisioned = grantFixture({ resource: { role: "shop_db_b", provider: "pg-main" }, conditions: [condition("Provisioned", "True")] });
const passed: CheckResult = { ok: true, message: "logs in", generation: 2, observedAt: at(1) };
const probe = (node: string, part: string, result: Partial<ProbeResult>): ProbeReport => ({
  grant: "shop/db",
  node,
  part,
  result: { ok: true, message: "logs in", generation: 2, observedAt: at(1), intervalMs: 1_000, ...result },
});
const record = (over: Partial<Verification> = {}): Verification => ({
  grant: "shop/db",
  basis: verificationBasis(provisioned),
  checkedAt: at(1),
  checkedBy: "v1",
  verifier: passed,
  probes: {},
  ...over,
});

describe("mergeRun", () => {
  it("keeps the most demanding mode, repairs if any request asked, keeps every probe and the first due time", () => {
    const a = mergeRun(undefined, { mode: "scheduled", dueAt: 5 });
    expect(a).toEqual({ mode: "scheduled", repair: false, probes: [], dueAt: 5 });
    const p = probe("node-a", "api", {});
    const b = mergeRun(a, { mode: "probe", probes: [p], repair: true, dueAt: 9 });
    expect(b).toEqual({ mode: "scheduled", repair: true, probes: [p], dueAt: 5 });
    expect(mergeRun(b, { mode: "forced" }).mode).toBe("forced");
  });
});

describe("decideRun", () => {
  const input = { grant: provisioned, record: record(), mode: "event" as const, probes: [], mine: true, now, defaultIntervalMs: 10_000 };

  it("skips a fresh check of the same basis, and checks when forced, when stale, or of another generation", () => {
    expect(decideRun(input)).toMatchObject({ checkable: true, check: false, intervalMs: 10_000, policy: "auto", rotating: false });
    expect(decideRun({ ...input, mode: "forced" }).check).toBe(true);
    expect(decideRun({ ...input, record: record({ checkedAt: at(9) }) }).check).toBe(true);
    expect(decideRun({ ...input, record: record({ verifier: { ...passed, generation: 1 } }) }).check).toBe(true);
    expect(decideRun({ ...input, record: undefined }).check).toBe(true);
  });

  it("leaves a grant another instance owns to its owner, unless a probe shows a node newly failing", () => {
    const other = { ...input, mine: false, record: undefined };
    expect(decideRun(other).check).toBe(false);
    const failing = probe("node-b", "worker", { ok: false, reason: "ProviderUnreachable" });
    expect(decideRun({ ...other, record: record(), probes: [failing] }).check).toBe(true);
    // Already known to fail from there, for the same reason: nothing new.
    expect(decideRun({ ...other, record: record({ probes: { "node-b/worker": failing.result } }), probes: [failing] }).check).toBe(false);
  });

  it("does not check what is not provisioned at its provider, and knows a rotation is running", () => {
    expect(decideRun({ ...input, grant: { ...provisioned, conditions: [] } })).toMatchObject({ checkable: false, check: false });
    expect(decideRun({ ...input, grant: { ...provisioned, conditions: [...provisioned.conditions, condition("Rotating", "True")] } }).rotating).toBe(true);
  });
});

describe("nextRecord", () => {
  const targets = new Set(["node-a/api", "node-b/worker"]);
  const update = { grant: "shop/db", basis: "b", instance: "v2", targets, probesSince: undefined, probes: [] as ProbeReport[] };

  it("replaces the check, keeping the holders' probes", () => {
    const kept = probe("node-a", "api", {}).result;
    const next = nextRecord(record({ probes: { "node-a/api": kept } }), { ...update, result: { ...passed, observedAt: at(0) } });
    expect(next).toMatchObject({ basis: "b", checkedBy: "v2", checkedAt: at(0), probes: { "node-a/api": kept } });
  });

  it("drops probes of parts that are no longer holders, and probes older than a repair", () => {
    const old = probe("node-a", "api", { observedAt: at(5) }).result;
    const gone = probe("node-c", "web", {}).result;
    const next = nextRecord(record({ probes: { "node-a/api": old, "node-c/web": gone } }), { ...update, result: undefined, probesSince: now - 2_000 });
    expect(next?.probes).toEqual({});
  });

  it("writes nothing when neither a check nor a probe worth storing came", () => {
    expect(nextRecord(record(), { ...update, result: undefined })).toBeUndefined();
    expect(nextRecord(undefined, { ...update, result: undefined, probes: [probe("node-a", "api", {})] })).toBeUndefined();
  });
});

describe("reportedGrantKey", () => {
  it("accepts a report only on the subject of its own node and part", () => {
    const r = probe("node-a", "api", {});
    expect(reportedGrantKey(subjects.probeReport("node-a", "shop", "api", "db"), r)).toBe("shop.db");
    expect(reportedGrantKey(subjects.probeReport("node-b", "shop", "api", "db"), r)).toBeUndefined();
    expect(reportedGrantKey(subjects.probeReport("node-a", "shop", "api", "db"), { ...r, grant: "not a grant" })).toBeUndefined();
  });
});
