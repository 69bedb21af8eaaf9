/**
 * Reachability from where the consumer runs, made real: node-b's agent is its own process in
 * its own network namespace (test/harness/netns.ts), where the only open ports are those the
 * test bridges in — NATS always, PostgreSQL only while the test says so. With PostgreSQL's
 * port closed there, node-b's agent gets ECONNREFUSED from its own kernel when it logs in with
 * what it was delivered and when it probes the provider's endpoint, exactly as a node behind a
 * firewall would; node-a's agent (in the test process) and the verifier reach it fine.
 *
 * Why not just give node-b's agent a closed port: its delivered values (host, port) are the
 * grant's and the same on every node, so a per-agent endpoint would test a configuration
 * mistake, not "reachable from one node but not from another".
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ReachabilityRecord, getCondition, keys, type ModuleDoc } from "@mesh/shared";
import { readJson } from "@mesh/shared/runtime";
import { startPostgres, type Postgres } from "./harness/postgres.js";
import { createNetns, startAgentInNetns, type AgentInNetns, type Bridge, type Netns } from "./harness/netns.js";
import { waitFor } from "./harness/wait.js";
import { startTestMesh, type TestMesh } from "./mesh.js";
import { delivered, useAsHolder, waitVerified } from "./verify-helpers.js";
import { adminEnv, harnessProvider } from "./fixtures.js";

const INTERVAL = 1_000;
const WITHIN = 2 * INTERVAL + 2_000;

describe("a provider reachable from one node's agent but not from another's", () => {
  let db: Postgres;
  let mesh: TestMesh;
  let ns: Netns;
  let pgPath: Bridge | undefined;
  let agentB: AgentInNetns;
  let bindingsB: string;

  const resolved = async (m: string, r: string) => getCondition((await mesh.grant(m, r))?.conditions ?? [], "Resolved");
  const reachabilityFromB = async () => (await readJson(mesh.store.kv.reachability, keys.reachability("node-b", "pg-main"), ReachabilityRecord))?.value;

  beforeAll(async () => {
    db = await startPostgres();
    mesh = await startTestMesh({ env: adminEnv(db), verifier: { intervalMs: INTERVAL }, probeIntervalMs: INTERVAL });
    ns = await createNetns();
    await ns.bridge(mesh.nats.port);
    pgPath = await ns.bridge(db.port);
    bindingsB = mkdtempSync(join(tmpdir(), "mesh-node-b-"));
    // node-b's agent, from sources (tsx), inside the namespace: NATS at the same address, bridged.
    agentB = await startAgentInNetns(ns, {
      node: "node-b",
      bindings: bindingsB,
      natsUrl: mesh.nats.url,
      probeInterval: `${INTERVAL}ms`,
      nodes: mesh.store.kv.nodes,
    });
  }, 90_000);
  afterAll(async () => {
    agentB?.process.kill("SIGTERM");
    await ns?.close();
    await mesh?.stop();
    await db?.stop();
    if (bindingsB) rmSync(bindingsB, { recursive: true, force: true });
  });

  it("the namespace is real: PostgreSQL's port is closed there unless bridged, NATS is open", async () => {
    expect(await ns.canConnect(db.port)).toBe(true);
    await pgPath!.close();
    expect(await ns.canConnect(db.port)).toBe(false);
    expect(await ns.canConnect(mesh.nats.port)).toBe(true);
    pgPath = await ns.bridge(db.port);
    expect(await ns.canConnect(db.port)).toBe(true);
  });

  it("→ the grant names the failing node; the path opens again → Verified from both nodes", async () => {
    const shop: ModuleDoc = {
      kind: "Module",
      name: "shop",
      parts: [
        { name: "api", node: "node-a", installed: true },
        { name: "worker", node: "node-b", installed: true },
      ],
      requires: [{ name: "db", kind: "postgres.database", parts: ["api", "worker"] }],
    };
    await mesh.apply([harnessProvider(db), shop]);
    await mesh.waitForState("shop", "Ready", 30_000);
    // Both agents' probes count once the message names both nodes.
    await waitVerified(
      mesh,
      "shop",
      "db",
      (c) => c.status === "True" && c.message.includes("node-a (api) and node-b (worker)"),
      "verified from both nodes",
      WITHIN,
    );

    // Close node-b's path to PostgreSQL (not to NATS).
    await pgPath!.close();
    pgPath = undefined;
    // (A probe in flight as the path closes sees "Connection terminated"; the next ones, the
    // closed port.)
    const failing = await waitVerified(
      mesh,
      "shop",
      "db",
      (c) => c.reason === "ProviderUnreachable" && c.message.includes("ECONNREFUSED"),
      "unreachable from node-b",
      WITHIN,
    );
    expect(failing.status).toBe("False");
    expect(failing.message).toContain("logs in from the verifier but not from node node-b (part worker)");
    expect(failing.message).not.toContain("node node-a (part api)");
    // node-a's holder is fine all along.
    await useAsHolder(delivered(mesh, "node-a", "shop", "api", "db"));
    // The resolver has node-b's agent's reachability report too.
    await waitFor(
      "Resolved to say ProviderUnreachable from node-b",
      async () => {
        const r = await resolved("shop", "db");
        return r?.reason === "ProviderUnreachable" ? r : undefined;
      },
      WITHIN,
    );
    expect((await resolved("shop", "db"))!.message).toContain("cannot be reached from node node-b");
    expect((await reachabilityFromB())?.reachable).toBe(false);

    // Open it again: everything comes back by itself.
    pgPath = await ns.bridge(db.port);
    await waitVerified(mesh, "shop", "db", (c) => c.status === "True" && c.message.includes("node-b (worker)"), "verified from both nodes again", WITHIN);
    await waitFor("Resolved True again", async () => ((await resolved("shop", "db"))?.status === "True" ? true : undefined), WITHIN);
    await mesh.waitForState("shop", "Ready", WITHIN);
  });

  it("a requirement whose only provider node-b cannot reach is ProviderUnreachable (from node-b) rather than a stall, and is provisioned once it can", async () => {
    await pgPath?.close();
    pgPath = undefined;
    await waitFor("node-b's agent to report pg-main unreachable", async () => ((await reachabilityFromB())?.reachable === false ? true : undefined), WITHIN);
    const reports: ModuleDoc = {
      kind: "Module",
      name: "reports",
      parts: [{ name: "job", node: "node-b", installed: true }],
      requires: [{ name: "db", kind: "postgres.database" }],
    };
    await mesh.apply([reports]);
    await mesh.waitForState("reports", "Unsatisfiable", WITHIN);
    const r = (await resolved("reports", "db"))!;
    expect(r).toMatchObject({ status: "False", reason: "ProviderUnreachable" });
    expect(r.message).toMatch(/provider pg-main \(node node-a\) cannot be reached from node node-b/);
    expect(r.message).toContain(`make 127.0.0.1:${db.port} reachable from there`);
    // Nothing was made for a part that could not use it.
    expect((await mesh.grant("reports", "db"))!.generation).toBe(0);
    expect((await db.query("select 1 from pg_roles where rolname like 'reports%'")).rows).toEqual([]);

    pgPath = await ns.bridge(db.port);
    await mesh.waitForState("reports", "Ready", 30_000);
    await waitVerified(mesh, "reports", "db", (c) => c.status === "True" && c.message.includes("node-b (job)"), "verified from node-b", WITHIN);
  });
});
