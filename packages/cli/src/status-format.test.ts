import { describe, expect, it } from "vitest";
import { formatStatus } from "./status-format.js";
import { buildStatusReport, notProcessedError } from "./status-report.js";
import { visibleLength } from "./style.js";
import { NOW, ago, cond, grant, moduleStatus, readyDb } from "./test-fixtures.js";

const pending = grant({
  requirement: "session-key",
  kind: "secret",
  parts: ["api", "worker"],
  provider: "builtin-secret",
  conditions: [
    cond("Resolved", "True", "ProviderSelected", "provider builtin-secret (built in)"),
    cond("Provisioned", "False", "AwaitingResolution", "waiting for the provisioner to generate generation 1 of this secret value"),
  ],
});

describe("buildStatusReport", () => {
  it("groups grants under their module, sorted, and lists stored manifests not processed", () => {
    const report = buildStatusReport(
      [moduleStatus({ module: "zeta", state: "NothingRequired", requirements: 0 }), moduleStatus()],
      [pending, readyDb, grant({ requirement: "x", module: "other", id: "other/x" })],
      ["shop", "zeta", "late"],
    );
    expect(report.modules.map((m) => m.module)).toEqual(["shop", "zeta"]);
    expect(report.modules[0]!.grants.map((g) => g.id)).toEqual(["shop/db", "shop/session-key"]);
    expect(report.modules[1]!.grants).toEqual([]);
    expect(report.unprocessed).toEqual(["late"]);
  });
});

describe("formatStatus", () => {
  const report = buildStatusReport([moduleStatus()], [readyDb, pending]);

  it("shows module state, each grant with provider and generation, and every condition with age and message", () => {
    const text = formatStatus(report, { now: NOW });
    expect(text).toContain("shop  Pending  since 2 min ago");
    expect(text).toContain("  db  postgres.database  provider pg-main  generation 1  parts api");
    expect(text).toContain("  session-key  secret  provider builtin-secret  generation 0  parts api,worker");
    expect(text).toMatch(/ {4}Provisioned {2}False +AwaitingResolution +5 s ago/);
    expect(text).toContain("      waiting for the provisioner to generate generation 1 of this");
    expect(text).toMatch(/Delivered +True +Delivered +30 s ago/);
  });

  it("fits 80 columns and has no colour codes unless asked", () => {
    const text = formatStatus(report, { now: NOW });
    for (const line of text.split("\n")) expect(line.length).toBeLessThanOrEqual(80);
    expect(text).not.toContain("\x1b[");
    const colored = formatStatus(report, { now: NOW, color: true });
    expect(colored).toContain("\x1b[33mPending\x1b[39m");
    for (const line of colored.split("\n")) expect(visibleLength(line)).toBeLessThanOrEqual(80);
  });

  it("says so when no module has been processed, and names stored ones the resolver has not reached", () => {
    expect(formatStatus({ modules: [] })).toBe("no module has been processed yet; apply one with: npx meshctl apply -f FILE");
    expect(formatStatus({ modules: [], unprocessed: ["shop"] })).toContain("stored but not processed yet: shop");
  });

  it("tells a never-processed module apart, with what is known about its manifest", () => {
    const stored = formatStatus({ modules: [], error: notProcessedError("shop", { storedAt: new Date(Date.parse(ago(90))) }, NOW) });
    expect(stored.split("\n")[0]).toBe("no manifest of module shop has been processed");
    expect(stored.replace(/\s+/g, " ")).toContain("a manifest of shop was stored 90 s ago, but the resolver has not processed it yet");
    const none = formatStatus({ modules: [], error: notProcessedError("shop", undefined, NOW) });
    expect(none).toContain("no manifest of shop is stored either");
  });
});
