import { describe, expect, it } from "vitest";
import { bootstrapProvider, getCondition, type ModuleDoc } from "@mesh/shared";
import { postgresProvider, shopModule } from "../../../test/fixtures.js";
import { applyResolution, chooseProvider, resolveModule } from "./resolve.js";

const pg = postgresProvider;

// The example module, plus a requirement of the uninstalled part only and one of every part.
const shop: ModuleDoc = {
  ...shopModule(),
  requires: [...shopModule().requires, { name: "jobs", kind: "postgres.database", parts: ["worker"] }, { name: "all", kind: "secret" }],
};

describe("chooseProvider", () => {
  const t = [{ part: "api", node: "node-b" }];
  it.each([
    { name: "no candidate", providers: [], current: null, provider: null, reason: "NoProvider" },
    { name: "only uninstalled", providers: [pg("p1", "node-a", false)], current: null, provider: null, reason: "ProviderNotInstalled" },
    { name: "installed one", providers: [pg("p1", "node-a", false), pg("p2", "node-a")], current: null, provider: "p2", reason: "ProviderSelected" },
    { name: "same node preferred", providers: [pg("p1", "node-a"), pg("p2", "node-b")], current: null, provider: "p2", reason: "ProviderSelected" },
    { name: "current kept", providers: [pg("p1", "node-a"), pg("p2", "node-b")], current: "p1", provider: "p1", reason: "ProviderSelected" },
    {
      name: "current uninstalled moves",
      providers: [pg("p1", "node-a", false), pg("p2", "node-c")],
      current: "p1",
      provider: "p2",
      reason: "ProviderSelected",
    },
  ])("$name", ({ providers, current, provider, reason }) => {
    const r = chooseProvider("postgres.database", t, providers, current);
    expect(r.provider).toBe(provider);
    expect(r.resolved.reason).toBe(reason);
    expect(r.resolved.status).toBe(provider ? "True" : "False");
  });

  it("names the uninstalled providers", () => {
    const r = chooseProvider("postgres.database", t, [pg("pg-main", "node-a", false)], null);
    expect(r.resolved.message).toContain("pg-main (node node-a)");
    expect(r.resolved.message).toContain("installed: true");
  });

  it("serves secrets with the built-in provider", () => {
    expect(chooseProvider("secret", t, [], null).provider).toBe("builtin-secret");
  });
});

describe("resolveModule", () => {
  const rs = resolveModule(shop, [pg("pg-main", "node-a")]);
  const by = new Map(rs.map((r) => [r.requirement, r]));
  it("targets only installed parts that name the requirement", () => {
    expect(by.get("db")!.targets).toEqual([{ part: "api", node: "node-a" }]);
    expect(by.get("session-key")!.targets).toEqual([{ part: "api", node: "node-a" }]);
    expect(by.get("jobs")!.targets).toEqual([]);
    expect(by.get("jobs")!.parts).toEqual(["worker"]);
  });
  it("gives a requirement without parts to every part", () => {
    expect(by.get("all")!.parts).toEqual(["api", "worker"]);
  });
});

describe("applyResolution", () => {
  const [db] = resolveModule(shop, [pg("pg-main", "node-a")]);
  it("creates a grant with its Resolved condition", () => {
    const g = applyResolution(undefined, db!)!;
    expect(g.id).toBe("shop/db");
    expect(g.generation).toBe(0);
    expect(getCondition(g.conditions, "Resolved")).toMatchObject({ status: "True", reason: "ProviderSelected" });
  });
  it("writes nothing when nothing changed", () => {
    const g = applyResolution(undefined, db!)!;
    expect(applyResolution(g, db!)).toBeUndefined();
  });
  it("keeps what the provisioner and agents recorded", () => {
    const g = {
      ...applyResolution(undefined, db!)!,
      generation: 3,
      resource: { role: "shop_db_a" },
      holders: { "node-a/api": { generation: 3, deliveredAt: "t" } },
    };
    const [again] = resolveModule(shop, [pg("pg-main", "node-a"), pg("other", "node-a")], new Map([["db", "pg-main"]]));
    const next = applyResolution(g, { ...again!, targets: [] });
    expect(next).toMatchObject({ generation: 3, resource: { role: "shop_db_a" }, provider: "pg-main" });
  });
});

describe("the bootstrap registries: the mesh's own NATS serves images and packages to module mesh only", () => {
  const bus = bootstrapProvider({
    url: "nats://127.0.0.1:4222",
    node: "node-a",
    auth: { signingKeysFile: "/k", admin: { username: "mesh-admin", passwordFile: "/c" } },
  });
  const registries = (name: string): ModuleDoc => ({
    kind: "Module",
    name,
    parts: [{ name: "agent-node-a", node: "node-a", installed: true }],
    requires: [
      { name: "images", kind: "oci.registry", parts: ["agent-node-a"] },
      { name: "packages", kind: "npm.registry", parts: ["agent-node-a"] },
    ],
  });
  it("satisfies the control plane's images and packages with it", () => {
    const r = resolveModule(registries("mesh"), [bus]).filter((x) => x.kind !== "mesh.identity");
    expect(r.map((x) => [x.requirement, x.provider, x.resolved.reason])).toEqual([
      ["images", "mesh-nats", "ProviderSelected"],
      ["packages", "mesh-nats", "ProviderSelected"],
    ]);
  });
  it("leaves another module's registry requirements NoProvider, saying the bootstrap one is the control plane's, until a registry server is a provider", () => {
    const r = resolveModule(registries("shop"), [bus]).filter((x) => x.kind !== "mesh.identity");
    expect(r.map((x) => [x.requirement, x.provider, x.resolved.reason])).toEqual([
      ["images", null, "NoProvider"],
      ["packages", null, "NoProvider"],
    ]);
    expect(r[0]!.resolved.message).toMatch(/mesh-nats serves oci\.registry to module mesh only/);
    const registry = {
      kind: "Provider" as const,
      name: "registry",
      serves: ["oci.registry" as const],
      node: "node-a",
      endpoint: "https://127.0.0.1:5000",
      installed: true,
    };
    expect(resolveModule(registries("shop"), [bus, registry])[0]!.provider).toBe("registry");
  });
});
