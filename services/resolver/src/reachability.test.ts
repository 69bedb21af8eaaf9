import { describe, expect, it } from "vitest";
import { getCondition, type ModuleDoc, type ProviderDoc, type ReachabilityRecord } from "@mesh/shared";
import { applyResolution, chooseProvider, resolveModule } from "./resolve.js";
import { unreachableFrom } from "./reachability.js";

const pg = (name: string, node: string): ProviderDoc => ({
  kind: "Provider",
  name,
  serves: ["postgres.database"],
  node,
  endpoint: "postgres://10.0.0.1:5432",
  installed: true,
});

const report = (node: string, provider: string, reachable: boolean): ReachabilityRecord => ({
  node,
  provider,
  address: "10.0.0.1:5432",
  reachable,
  message: reachable ? "" : `provider ${provider} at 10.0.0.1:5432 does not accept connections from node ${node} (ECONNREFUSED)`,
  since: "2026-01-01T00:00:00.000Z",
});

describe("unreachableFrom", () => {
  const targets = [
    { part: "api", node: "node-a" },
    { part: "worker", node: "node-b" },
  ];
  it("lists the target nodes that report the provider unreachable, by node", () => {
    const reports = [report("node-b", "p1", false), report("node-a", "p1", true), report("node-c", "p1", false), report("node-a", "p2", false)];
    expect(unreachableFrom("p1", targets, reports).map((r) => r.node)).toEqual(["node-b"]);
  });
  it("counts a node that has not reported as reachable", () => {
    expect(unreachableFrom("p1", targets, [])).toEqual([]);
  });
});

describe("chooseProvider with agents' reachability", () => {
  const t = [{ part: "worker", node: "node-b" }];
  it.each([
    {
      name: "only provider unreachable from the part's node",
      providers: [pg("p1", "node-a")],
      current: null,
      reports: [report("node-b", "p1", false)],
      provider: "p1",
      reason: "ProviderUnreachable",
    },
    {
      name: "reachable from elsewhere only does not help",
      providers: [pg("p1", "node-a")],
      current: null,
      reports: [report("node-a", "p1", true), report("node-b", "p1", false)],
      provider: "p1",
      reason: "ProviderUnreachable",
    },
    {
      name: "a reachable provider is preferred for a new choice",
      providers: [pg("p1", "node-b"), pg("p2", "node-a")],
      current: null,
      reports: [report("node-b", "p1", false)],
      provider: "p2",
      reason: "ProviderSelected",
    },
    {
      name: "the current provider is kept, and reported unreachable",
      providers: [pg("p1", "node-a"), pg("p2", "node-a")],
      current: "p1",
      reports: [report("node-b", "p1", false)],
      provider: "p1",
      reason: "ProviderUnreachable",
    },
    {
      name: "reachable again",
      providers: [pg("p1", "node-a")],
      current: "p1",
      reports: [report("node-b", "p1", true)],
      provider: "p1",
      reason: "ProviderSelected",
    },
  ])("$name", ({ providers, current, reports, provider, reason }) => {
    const r = chooseProvider("postgres.database", t, providers, current, reports);
    expect(r.provider).toBe(provider);
    expect(r.resolved.reason).toBe(reason);
    expect(r.resolved.status).toBe(reason === "ProviderSelected" ? "True" : "False");
  });

  it("names the node and what to do", () => {
    const r = chooseProvider("postgres.database", t, [pg("p1", "node-a")], null, [report("node-b", "p1", false)]);
    expect(r.resolved.message).toContain("cannot be reached from node node-b");
    expect(r.resolved.message).toContain("ECONNREFUSED");
    expect(r.resolved.message).toContain("make 10.0.0.1:5432 reachable from there");
  });

  it("a report about another provider does not block the one chosen", () => {
    expect(chooseProvider("secret", t, [], null, [report("node-b", "p1", false)]).resolved.reason).toBe("ProviderSelected");
  });
});

describe("verify and repair policies", () => {
  const m: ModuleDoc = {
    kind: "Module",
    name: "shop",
    parts: [{ name: "api", node: "node-a", installed: true }],
    requires: [
      { name: "db", kind: "postgres.database", verify: { every: "30s" }, repair: "report" },
      { name: "key", kind: "secret" },
    ],
  };
  it("are copied onto the grant, and removed when the manifest drops them", () => {
    const [db, key] = resolveModule(m, [pg("p1", "node-a")]);
    const g = applyResolution(undefined, db!)!;
    expect(g.verify).toEqual({ every: "30s" });
    expect(g.repair).toBe("report");
    expect(applyResolution(undefined, key!)!.verify).toBeUndefined();
    // Same resolution again: nothing to write.
    expect(applyResolution(JSON.parse(JSON.stringify(g)), db!)).toBeUndefined();
    const dropped = applyResolution(g, { ...db!, verify: undefined, repair: undefined })!;
    expect(JSON.parse(JSON.stringify(dropped))).not.toHaveProperty("verify");
    expect(getCondition(dropped.conditions, "Resolved")?.status).toBe("True");
  });
});
