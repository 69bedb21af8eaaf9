import { describe, expect, it } from "vitest";
import { keys, type Grant, type ModuleDoc, type ModuleStatus, type ProviderDoc, type ReachabilityRecord, type Rotation, type Verification } from "@mesh/shared";
import { applyChange, emptySnapshot, type ConsoleSnapshot } from "./snapshot.js";
import { endpointShown, grantPage, graphModel, rotationTimeline } from "./model.js";
import { routeConcerns, routeOf } from "./views.js";
import { NOW, ago, cond, grant, moduleStatus, nodeA, pgMain, readyDb, rotationFixture } from "../test-fixtures.js";

/** A snapshot holding these records, each at revision 1. */
function snapOf(r: {
  modules?: ModuleStatus[];
  grants?: Grant[];
  providers?: ProviderDoc[];
  manifests?: ModuleDoc[];
  reachability?: ReachabilityRecord[];
  rotations?: Rotation[];
}): ConsoleSnapshot {
  const s = emptySnapshot();
  for (const m of r.modules ?? []) applyChange(s, "modules", m.module, m, 1);
  for (const g of r.grants ?? []) applyChange(s, "grants", keys.grant(g.module, g.requirement), g, 1);
  for (const p of r.providers ?? []) applyChange(s, "providers", p.name, p, 1);
  for (const m of r.manifests ?? []) applyChange(s, "manifests", m.name, m, 1);
  for (const x of r.reachability ?? []) applyChange(s, "reachability", keys.reachability(x.node, x.provider), x, 1);
  for (const x of r.rotations ?? []) applyChange(s, "rotations", keys.grant(x.module, x.requirement), x, 1);
  applyChange(s, "nodes", "node-a", nodeA, 1);
  return s;
}

const verifiedDb: Grant = {
  ...readyDb,
  provider: "pg-main",
  conditions: [...readyDb.conditions, cond("Verified", "True", "Verified", "generation 1 logs in")],
};
const ready = moduleStatus({ state: "Ready", message: "all requirements of installed parts are satisfied", requirements: 1 });

const rotation = rotationFixture;

describe("graphModel", () => {
  it("draws a satisfied module through its requirement and grant to its provider, all ok", () => {
    const m = graphModel(snapOf({ modules: [ready], grants: [verifiedDb], providers: [pgMain] }), NOW);
    expect(m.nodes.map((n) => [n.id, n.state, n.tone])).toEqual([
      ["module:shop", "Ready", "ok"],
      ["requirement:shop/db", "satisfied", "ok"],
      ["grant:shop/db", "satisfied", "ok"],
      ["provider:pg-main", "installed", "ok"],
    ]);
    expect(m.edges).toEqual([
      { from: "module:shop", to: "requirement:shop/db", label: "requires" },
      { from: "requirement:shop/db", to: "grant:shop/db", label: "granted as" },
      { from: "grant:shop/db", to: "provider:pg-main", label: "served by" },
    ]);
    expect(m.summary).toEqual([{ state: "Ready", tone: "ok", count: 1 }]);
    expect(m.nodes.find((n) => n.id === "grant:shop/db")).toMatchObject({ href: "/grant/shop/db", lines: ["postgres.database", "generation 1"] });
  });

  it("says NoProvider on an unsatisfiable module's grant, and explain's why and next on its requirement", () => {
    const cache = grant({
      requirement: "cache",
      kind: "redis.user",
      provider: null,
      conditions: [cond("Resolved", "False", "NoProvider", "no provider serves redis.user")],
    });
    const m = graphModel(snapOf({ modules: [moduleStatus({ state: "Unsatisfiable", message: "cache: no provider" })], grants: [cache] }), NOW);
    expect(m.nodes.find((n) => n.id === "module:shop")).toMatchObject({ state: "Unsatisfiable", tone: "bad", detail: "cache: no provider" });
    expect(m.nodes.find((n) => n.id === "grant:shop/cache")).toMatchObject({ tone: "bad", reason: "NoProvider", state: "Resolved False" });
    const req = m.nodes.find((n) => n.id === "requirement:shop/cache")!;
    expect(req).toMatchObject({ state: "cannot be satisfied yet", tone: "bad" });
    expect(req.detail).toContain("no provider serves redis.user Next: apply a Provider document with `serves: [redis.user]`");
  });

  it("names the nodes a provider is unreachable from, on the grant and on the provider", () => {
    const g = grant({
      requirement: "db",
      provider: "pg-main",
      targets: [{ part: "worker", node: "node-b" }],
      conditions: [cond("Resolved", "False", "ProviderUnreachable", "provider pg-main (node node-a) cannot be reached from node node-b")],
    });
    const unreachable: ReachabilityRecord = {
      node: "node-b",
      provider: "pg-main",
      address: "127.0.0.1:5432",
      reachable: false,
      message: "connect ECONNREFUSED",
      since: ago(9),
    };
    const m = graphModel(snapOf({ modules: [moduleStatus({ state: "Unsatisfiable" })], grants: [g], providers: [pgMain], reachability: [unreachable] }), NOW);
    expect(m.nodes.find((n) => n.id === "grant:shop/db")?.reason).toBe("ProviderUnreachable from node-b");
    expect(m.nodes.find((n) => n.id === "provider:pg-main")).toMatchObject({ tone: "warn", reason: "ProviderUnreachable from node-b" });
  });

  it("shows a provider's needs, provisioned or not, as lines and edges; one not installed as a dashed candidate", () => {
    const records = grant({ requirement: "records", kind: "kv.bucket", generation: 0, conditions: [cond("Resolved", "True", "ProviderSelected", "x")] });
    const broker: ProviderDoc = { ...pgMain, name: "broker", needs: ["shop/db", "shop/records"] };
    const idle: ProviderDoc = { ...pgMain, name: "pg-spare", installed: false, serves: ["redis.user"] };
    const cache = grant({
      requirement: "cache",
      kind: "redis.user",
      provider: null,
      conditions: [cond("Resolved", "False", "ProviderNotInstalled", "not installed")],
    });
    const m = graphModel(snapOf({ modules: [ready], grants: [verifiedDb, records, cache], providers: [broker, pgMain, idle] }), NOW);
    const b = m.nodes.find((n) => n.id === "provider:broker")!;
    expect(b.lines).toContain("needs shop/db (provisioned), shop/records (not provisioned)");
    expect(b).toMatchObject({ tone: "warn", reason: "AwaitingDependency: shop/records" });
    expect(m.edges).toContainEqual({ from: "provider:broker", to: "grant:shop/db", label: "needs" });
    expect(m.edges).toContainEqual({ from: "grant:shop/cache", to: "provider:pg-spare", label: "could be served by" });
    expect(m.nodes.find((n) => n.id === "provider:pg-spare")).toMatchObject({ state: "not installed", tone: "bad", reason: "ProviderNotInstalled" });
  });

  it("lists a stored manifest the resolver has not processed, in those words; the built-in provider when used", () => {
    const key = grant({
      requirement: "key",
      kind: "secret",
      provider: "builtin-secret",
      generation: 1,
      conditions: [cond("Resolved", "True", "ProviderSelected", "x")],
    });
    const doc: ModuleDoc = { kind: "Module", name: "later", parts: [{ name: "web", node: "node-a", installed: true }], requires: [] };
    const m = graphModel(snapOf({ modules: [ready], grants: [key], manifests: [doc] }), NOW);
    expect(m.nodes.find((n) => n.id === "module:later")).toMatchObject({ state: "not processed", tone: "warn" });
    expect(m.nodes.find((n) => n.id === "provider:builtin-secret")).toMatchObject({ state: "built in", tone: "ok" });
  });

  it("lists the grants the manifest does not declare (a part's identity) beside the declared ones", () => {
    const doc: ModuleDoc = {
      kind: "Module",
      name: "shop",
      parts: [{ name: "api", node: "node-a", installed: true }],
      requires: [{ name: "db", kind: "postgres.database", parts: ["api"] }],
    };
    const identity = grant({
      requirement: "identity-api",
      kind: "mesh.identity",
      provider: "mesh-nats",
      generation: 1,
      conditions: [cond("Resolved", "True", "ProviderSelected", "x")],
    });
    const m = graphModel(snapOf({ modules: [ready], grants: [verifiedDb, identity], providers: [pgMain], manifests: [doc] }), NOW);
    expect(m.edges.filter((e) => e.label === "requires").map((e) => e.to)).toEqual(["requirement:shop/db", "requirement:shop/identity-api"]);
  });

  it("marks a grant whose rotation is Stalled", () => {
    const m = graphModel(snapOf({ modules: [ready], grants: [verifiedDb], providers: [pgMain], rotations: [rotation({ state: "Stalled" })] }), NOW);
    const g = m.nodes.find((n) => n.id === "grant:shop/db")!;
    expect(g.tone).toBe("bad");
    expect(g.lines).toContain("rotating 1→2: Stalled, 1/2 confirmed");
    expect(m.running).toEqual([
      expect.objectContaining({ id: "shop/db#2", state: "Stalled", tone: "bad", href: "/rotation/shop/db/2", missing: ["node-b/worker/i-1"] }),
    ]);
  });

  it("shows an endpoint without its credentials", () => {
    expect(endpointShown("postgres://admin:hunter2@db.example:5432/x?sslmode=require")).toBe("postgres://db.example:5432/x");
    expect(endpointShown("nats://127.0.0.1:4222")).toBe("nats://127.0.0.1:4222");
  });
});

describe("grantPage", () => {
  const verification: Verification = {
    grant: "shop/db",
    basis: "b",
    checkedAt: ago(2),
    checkedBy: "verifier@h/1",
    verifier: { ok: true, message: "generation 2 logs in", generation: 2, observedAt: ago(2) },
    probes: {
      "node-a/api": { ok: true, message: "logs in from node-a", generation: 2, observedAt: ago(1), intervalMs: 10_000 },
      "node-b/worker": { ok: false, reason: "CredentialRejected", message: "rejected from node-b", generation: 1, observedAt: ago(120), intervalMs: 10_000 },
    },
  };
  const g: Grant = {
    ...verifiedDb,
    generation: 2,
    holders: { "node-a/api": { generation: 2, deliveredAt: ago(20) }, "node-b/worker": { generation: 1, deliveredAt: ago(400) } },
    repairs: [
      {
        at: ago(300),
        by: "verifier@h/1",
        action: "reapply",
        reason: "CredentialDiverged",
        generation: 1,
        outcome: "repaired",
        message: "first",
        requested: false,
      },
      { at: ago(100), by: "verifier@h/1", action: "recreate", reason: "ResourceMissing", generation: 1, outcome: "failed", message: "second", requested: true },
    ],
  };

  it("has the generations with when each began, the holders on each, checks per node (stale marked), repairs and rotations newest first", () => {
    const committed = rotation({ state: "Committed", committedAt: ago(50), holders: { "node-a/api": { r: 1, a: 2, c: 3 } } });
    const p = grantPage(g, {
      verification,
      history: [
        { generation: 0, at: ago(900) },
        { generation: 1, at: ago(800) },
        { generation: 1, at: ago(700) },
      ],
      rotations: [committed],
      now: NOW,
    });
    expect(p.generations).toEqual([
      { generation: 2, since: ago(50), current: true, holders: ["node-a/api"] },
      { generation: 1, since: ago(800), current: false, holders: ["node-b/worker"] },
    ]);
    expect(p.holders.map((h) => [h.holder, h.current])).toEqual([
      ["node-a/api", true],
      ["node-b/worker", false],
    ]);
    expect(p.checks.map((c) => [c.from, c.ok, c.reason, c.stale])).toEqual([
      ["verifier (verifier@h/1)", true, undefined, false],
      ["node-a/api", true, undefined, false],
      ["node-b/worker", false, "CredentialRejected", true],
    ]);
    expect(p.repairs.map((r) => r.message)).toEqual(["second", "first"]);
    expect(p.rotations).toEqual([
      expect.objectContaining({ id: "shop/db#2", state: "Committed", tone: "ok", href: "/rotation/shop/db/2", confirmed: 1, total: 1 }),
    ]);
    expect(p.running).toBeUndefined();
    expect(p.lastCheck).toEqual({ lastCheckedAt: ago(1), lastCheckedFrom: "node-a" });
  });

  it("names the running rotation", () => {
    const p = grantPage(g, { rotations: [rotation()], now: NOW });
    expect(p.running).toMatchObject({ id: "shop/db#2", state: "AwaitingHolders", confirmed: 1, total: 2 });
  });
});

describe("rotationTimeline", () => {
  it("has one row per holder, agent or SDK, with its events; a Stalled rotation marks who has not confirmed", () => {
    const t = rotationTimeline(rotation({ state: "Stalled" }));
    expect(t.rows.map((r) => [r.holder, r.via, r.status, r.tone])).toEqual([
      ["node-a/api", "agent", "confirmed", "ok"],
      ["node-b/worker/i-1", "sdk", "stalled", "bad"],
    ]);
    expect(t.rows[0]!.applied).toEqual({ clock: "holder", offsetMs: 140, at: new Date(Date.parse(ago(60)) + 140).toISOString() });
    expect(t.rows[1]!.confirmed).toBeNull();
    expect(t.spanMs).toBe(151);
    expect(t.outcome).toContain("Stalled: 1 of 2 holders have not confirmed generation 2");
    expect(t.tone).toBe("bad");
  });

  it("while waiting, the holder that has not confirmed is waiting, not stalled; Committed says so", () => {
    expect(rotationTimeline(rotation()).rows[1]).toMatchObject({ status: "waiting", tone: "warn" });
    const done = rotationTimeline(rotation({ state: "Committed", holders: { "node-a/api": { r: 1, a: 2, c: 3 } } }));
    expect(done.outcome).toBe("Committed: every holder (1/1) confirmed generation 2; generation 1 is retired");
  });
});

describe("routeOf", () => {
  it.each([
    ["/", { page: "overview" }],
    ["/grant/shop/db", { page: "grant", grant: "shop/db" }],
    ["/rotation/shop/db/3", { page: "rotation", rotation: "shop/db#3" }],
    ["/grant/shop", undefined],
    ["/grant/sh%20op/db", undefined],
    ["/rotation/shop/db/x", undefined],
    ["/etc/passwd", undefined],
  ])("%s", (path, route) => {
    expect(routeOf(path)).toEqual(route);
  });
});

describe("routeConcerns", () => {
  it.each([
    [{ page: "overview" }, "grants", "shop.db", true],
    [{ page: "overview" }, "verifications", "shop.db", false],
    [{ page: "grant", grant: "shop/db" }, "verifications", "shop.db", true],
    [{ page: "grant", grant: "shop/db" }, "grants", "shop.key", false],
    [{ page: "grant", grant: "shop/db" }, "modules", "shop", false],
    [{ page: "rotation", rotation: "shop/db#2" }, "rotations", "shop.db", true],
    [{ page: "rotation", rotation: "shop/db#2" }, "grants", "shop.db", false],
  ] as const)("%o, a change of %s %s: %s", (route, bucket, key, concerns) => {
    expect(routeConcerns(route, { bucket, key })).toBe(concerns);
  });
});

describe("applyChange", () => {
  it("keeps the newest revision: an older value or delete after a newer one changes nothing", () => {
    const s = emptySnapshot();
    expect(applyChange(s, "modules", "shop", ready, 5)).toBe(true);
    expect(applyChange(s, "modules", "shop", moduleStatus(), 4)).toBe(false);
    expect(applyChange(s, "modules", "shop", undefined, 5)).toBe(false);
    expect(s.modules.get("shop")?.value.state).toBe("Ready");
    expect(applyChange(s, "modules", "shop", undefined, 6)).toBe(true);
    expect(s.modules.size).toBe(0);
  });
});
