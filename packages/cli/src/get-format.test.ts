import { stripVTControlCharacters } from "node:util";
import { describe, expect, it } from "vitest";
import type { ModuleDoc, ReachabilityRecord } from "@mesh/shared";
import type { CliError } from "./cli-error.js";
import { ExitCodes } from "./exit-codes.js";
import { checkGetName, parseGetResource, rowChanges } from "./get-command.js";
import { formatGrantRows, formatModuleRows, formatProviderRows, formatTable } from "./get-format.js";
import { grantRows, moduleRows, providerRows, type MeshRecords } from "./get-report.js";
import { NOW, ago, cond, grant, moduleStatus, nodeA, pgMain, readyDb } from "./test-fixtures.js";

const pendingKey = grant({
  requirement: "key",
  kind: "secret",
  provider: "builtin-secret",
  conditions: [cond("Resolved", "True", "ProviderSelected", "built-in", 20), cond("Provisioned", "False", "AwaitingResolution", "…", 8)],
});

function records(over: Partial<MeshRecords> = {}): MeshRecords {
  return {
    modules: [
      moduleStatus({ module: "shop", state: "Pending", message: "waiting for key", since: ago(120) }),
      moduleStatus({ module: "blog", state: "NothingRequired", message: "the module declares no requirement", requirements: 0, since: ago(7) }),
    ],
    grants: [readyDb, pendingKey],
    manifests: new Map(),
    storedManifests: ["blog", "shop"],
    providers: [pgMain],
    nodes: [nodeA],
    reachability: [],
    ...over,
  };
}

describe("formatTable", () => {
  it("aligns every column on its widest cell, colour codes not counted, the last one ragged", () => {
    const t = formatTable(
      ["NAME", "STATE", "REASON"],
      [
        ["shop", "\x1b[32mReady\x1b[39m", "all fine"],
        ["a-longer-name", "Pending", "x"],
      ],
    );
    expect(stripVTControlCharacters(t).split("\n")).toEqual([
      "NAME           STATE    REASON",
      "shop           Ready    all fine",
      "a-longer-name  Pending  x",
    ]);
  });

  it("cuts lines to a width with an ellipsis", () => {
    expect(formatTable(["A", "B"], [["x", "a long message that does not fit"]], 12).split("\n")[1]).toBe("x  a long m…");
  });
});

describe("get modules", () => {
  it("lists modules by name with state, requirements satisfied, age and reason", () => {
    const rows = moduleRows(records());
    expect(rows).toEqual([
      { name: "blog", state: "NothingRequired", ready: { satisfied: 0, total: 0 }, message: "the module declares no requirement", since: ago(7), parts: [] },
      { name: "shop", state: "Pending", ready: { satisfied: 1, total: 2 }, message: "waiting for key", since: ago(120), parts: [] },
    ]);
    expect(formatModuleRows(rows, { now: NOW }).split("\n")).toEqual([
      "NAME  STATE            READY  SINCE      REASON",
      "blog  NothingRequired  0/0    7 s ago    the module declares no requirement",
      "shop  Pending          1/2    2 min ago  waiting for key",
    ]);
  });
});

describe("get grants", () => {
  it("lists each requirement with provider, generation, holders, explain's state and the first unmet reason", () => {
    const rows = grantRows(records());
    expect(rows.map((r) => [r.id, r.provider, r.generation, r.holders, r.state, r.reason])).toEqual([
      ["shop/db", "pg-main", 1, { current: 1, total: 1 }, "Satisfied", null],
      ["shop/key", "builtin-secret", 0, { current: 0, total: 1 }, "InProgress", "AwaitingResolution"],
    ]);
    expect(rows[0]!.updatedAt).toBe(ago(30));
    const text = formatGrantRows(rows, { now: NOW }).split("\n");
    expect(text[0]).toBe("NAME      KIND               PROVIDER        GEN  HOLDERS  STATE       REASON              UPDATED");
    expect(text[1]).toBe("shop/db   postgres.database  pg-main         1    1/1      Satisfied   -                   30 s ago");
    expect(text[2]).toBe("shop/key  secret             builtin-secret  0    0/1      InProgress  AwaitingResolution  8 s ago");
  });

  it("lists the grants the manifest does not declare too (each part's identity), after the declared ones", () => {
    const doc: ModuleDoc = {
      kind: "Module",
      name: "shop",
      parts: [{ name: "api", node: "node-a", installed: true }],
      requires: [
        { name: "db", kind: "postgres.database" },
        { name: "key", kind: "secret" },
      ],
    };
    const identity = grant({
      requirement: "nats-api",
      kind: "mesh.identity",
      provider: "mesh-nats",
      conditions: [cond("Resolved", "True", "ProviderSelected", "mesh-nats", 9)],
    });
    const r = records({ grants: [readyDb, pendingKey, identity], manifests: new Map([["shop", { doc, revision: 3 }]]) });
    expect(grantRows(r).map((g) => g.id)).toEqual(["shop/db", "shop/key", "shop/nats-api"]);
    expect(moduleRows(r).find((m) => m.name === "shop")!.ready).toEqual({ satisfied: 1, total: 3 });
  });

  it("shows with -o wide where each grant goes and what the verifier says, and each module's parts", () => {
    const doc: ModuleDoc = {
      kind: "Module",
      name: "shop",
      parts: [
        { name: "api", node: "node-a", installed: true },
        { name: "worker", node: "node-b", installed: false },
      ],
      requires: [{ name: "db", kind: "postgres.database" }],
    };
    const verified = { ...readyDb, conditions: [...readyDb.conditions, cond("Verified", "True", "Verified", "logs in", 3)] };
    const r = records({ grants: [verified], manifests: new Map([["shop", { doc, revision: 1 }]]) });
    const grants = formatGrantRows(grantRows(r), { now: NOW, wide: true }).split("\n");
    expect(grants[0]).toBe("NAME     KIND               PROVIDER  GEN  HOLDERS  STATE      VERIFIED       TARGETS     REASON  UPDATED");
    expect(grants[1]).toBe("shop/db  postgres.database  pg-main   1    1/1      Satisfied  True Verified  api@node-a  -       3 s ago");
    const modules = formatModuleRows(moduleRows(r), { now: NOW, wide: true }).split("\n");
    expect(modules[0]).toBe("NAME  STATE            READY  SINCE      PARTS                                    REASON");
    expect(modules[2]).toBe("shop  Pending          1/1    2 min ago  api@node-a,worker@node-b(not installed)  waiting for key");
    expect(formatProviderRows(providerRows(r), { wide: true }).split("\n")[0]).toBe(
      "NAME            SERVES             NODE    INSTALLED  GRANTS  PREFERENCE  ENDPOINT                   REACHABLE",
    );
  });

  it("shows terminal escapes in a record as text", () => {
    const rows = moduleRows(records({ modules: [moduleStatus({ message: "evil \x1b]0;title\x07" })] }));
    expect(formatModuleRows(rows, { now: NOW })).toContain("evil \\x1b]0;title\\x07");
  });
});

describe("get providers", () => {
  it("lists registered providers and the built-in one, with the grants they serve and where they are reached from", () => {
    const down: ReachabilityRecord = {
      node: "node-b",
      provider: "pg-main",
      address: "127.0.0.1:5432",
      reachable: false,
      message: "connection refused",
      since: ago(9),
    };
    const up: ReachabilityRecord = { ...down, node: "node-a", reachable: true, message: "" };
    const rows = providerRows(records({ reachability: [down, up] }));
    expect(rows.map((r) => [r.name, r.grants, r.builtin, r.reachableFrom, r.unreachableFrom.map((u) => u.node)])).toEqual([
      ["builtin-secret", 1, true, 0, []],
      ["pg-main", 1, false, 1, ["node-b"]],
    ]);
    expect(formatProviderRows(rows).split("\n")).toEqual([
      "NAME            SERVES             NODE    INSTALLED  GRANTS  REACHABLE",
      "builtin-secret  secret             -       yes        1       built-in",
      "pg-main         postgres.database  node-a  yes        1       1/2 nodes, not from node-b",
    ]);
  });
});

describe("get -w", () => {
  it("says which rows were added, changed and deleted since the last look, in name order", () => {
    const prev = new Map([
      ["a", { v: 1 }],
      ["b", { v: 1 }],
      ["c", { v: 1 }],
    ]);
    const next = new Map([
      ["a", { v: 1 }],
      ["d", { v: 1 }],
      ["b", { v: 2 }],
    ]);
    expect(rowChanges(prev, next)).toEqual([
      { event: "MODIFIED", id: "b", row: { v: 2 } },
      { event: "DELETED", id: "c", row: { v: 1 } },
      { event: "ADDED", id: "d", row: { v: 1 } },
    ]);
    expect(rowChanges(next, next)).toEqual([]);
  });
});

describe("get's arguments", () => {
  it("refuses what cannot be named, as wrong usage, before anything connects", () => {
    const usage = (fn: () => void) => {
      try {
        fn();
      } catch (e) {
        return [(e as CliError).exitCode, (e as CliError).message];
      }
    };
    expect(parseGetResource("module")).toBe("modules");
    expect(parseGetResource("grants")).toBe("grants");
    expect(usage(() => parseGetResource("pods"))).toEqual([ExitCodes.Usage, 'cannot get "pods": give one of modules, grants, providers']);
    expect(usage(() => checkGetName("providers", "Bad_Name"))?.[1]).toMatch(/^"Bad_Name" is not a provider name/);
    expect(usage(() => checkGetName("grants", "shop/"))?.[1]).toMatch(/^"shop\/" is not a grant id/);
    expect(usage(() => checkGetName("modules", "shop"))).toBeUndefined();
  });
});
