/**
 * A node's agent partitioned from the cluster in the middle of a rotation, and reconnected:
 * node-b's agent runs in a network namespace of its own (harness/netns.ts), where the three
 * servers' client ports are open only while the test bridges them. The bridges are closed (its
 * connections cut, new ones refused by the kernel), a rotation of a grant its part holds is
 * started, and it waits for node-b (node-a confirmed, generation 1 still working for both);
 * the bridges are opened again, and the mesh resumes by itself: node-b's agent reconnects,
 * takes generation 2 from its consumer, and the rotation commits. Holders on both nodes log in
 * to Redis with what their agents wrote every 50 ms throughout, with no failure.
 *
 * The cluster is three plain servers (no operator): an agent in a namespace of its own cannot
 * be one of `meshctl bootstrap`'s, whose agents it starts itself. The rest of the mesh runs in
 * this process (test/mesh.ts) with a rotator.
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Kinds, Rotation, RotationStates, createLogger, keys, readJson } from "@mesh/shared";
import { createAdapter, type BindingValues, type ProviderAdapter } from "@mesh/providers";
import { startRotator, type Rotator } from "@mesh/rotator";
import { startTestMesh, type TestMesh } from "../mesh.js";
import { startPlainCluster } from "../harness/nats-cluster.js";
import type { NatsServer } from "../harness/nats-server.js";
import { createNetns, startAgentInNetns, type AgentInNetns, type Bridge, type Netns } from "../harness/netns.js";
import { startOwnRedis, type OwnRedis } from "../harness/redis.js";
import { waitFor } from "../harness/wait.js";
import { grantInvariants, printResume } from "./mesh-on-cluster.js";


describe("a node's agent partitioned from the cluster during a rotation, and reconnected", () => {
  let cluster: Awaited<ReturnType<typeof startPlainCluster>>;
  let redis: OwnRedis;
  let mesh: TestMesh;
  let rotator: Rotator;
  let ns: Netns;
  let agentB: AgentInNetns;
  let bindingsB: string;
  let login: ProviderAdapter;
  let natsBridges: Bridge[] = [];
  const env = { ...process.env };

  beforeAll(async () => {
    [cluster, redis] = await Promise.all([startPlainCluster(), startOwnRedis()]);
    env.PARTITION_REDIS_PASSWORD = redis.adminPassword;
    // A meta leader that knows both other servers as current peers: until then, an R3 stream has "no suitable peers for placement".
    await waitFor("every server a current JetStream peer", async () => {
      for (const m of cluster.members) {
        // Only the meta leader lists its peers.
        const j = (await (await fetch(`http://127.0.0.1:${m.monitorPort}/jsz`)).json().catch(() => ({}))) as { meta_cluster?: { replicas?: Array<{ current?: boolean }> } };
        const peers = j.meta_cluster?.replicas;
        if (peers && peers.length === cluster.members.length - 1 && peers.every((r) => r.current)) return true;
      }
      return undefined;
    }, 60_000, 200);
    // The mesh's services on the cluster (every URL), stopped with it.
    const servers = { ...cluster.members[0]!, url: cluster.url, stop: () => cluster.stop() } as NatsServer;
    mesh = await startTestMesh({ nodes: ["node-a"], nats: servers, env, probeIntervalMs: 1_000 });
    rotator = await startRotator({ store: mesh.store, masterKey: mesh.masterKey, env, log: createLogger("rotator", { destination: mesh.logs, level: "debug" }), sweepMs: 500 });
    login = createAdapter(Kinds.RedisUser, { name: "check", node: "node-a", endpoint: redis.endpoint });
    ns = await createNetns();
    natsBridges = await Promise.all(cluster.members.map((m) => ns.bridge(m.port)));
    await ns.bridge(redis.port); // the agent checks each generation it takes by logging in
    bindingsB = mkdtempSync(join(tmpdir(), "mesh-node-b-"));
    agentB = await startAgentInNetns(ns, { node: "node-b", bindings: bindingsB, natsUrl: cluster.url, probeInterval: "1s", nodes: mesh.store.kv.nodes });
  }, 180_000);
  afterAll(async () => {
    agentB?.process.kill("SIGTERM");
    await ns?.close();
    await login?.close();
    await rotator?.stop();
    await mesh?.stop();
    await redis?.stop();
    if (bindingsB) rmSync(bindingsB, { recursive: true, force: true });
  });

  const binding = (root: string, part: string): BindingValues => {
    const dir = join(root, "app", part, "cache");
    return Object.fromEntries(["host", "port", "username", "password"].map((k) => [k, readFileSync(join(dir, k), "utf8")]));
  };

  it("waits for the partitioned holder with generation 1 working, and commits within 30 s of the reconnect; no login fails", async () => {
    const applied = await mesh.apply([
      { kind: "Provider", name: "redis-main", serves: ["redis.user"], node: "node-a", endpoint: redis.endpoint, admin: { username: redis.adminUser, passwordEnv: "PARTITION_REDIS_PASSWORD" } },
      {
        kind: "Module",
        name: "app",
        parts: [
          { name: "api", node: "node-a" },
          { name: "worker", node: "node-b" },
        ],
        requires: [{ name: "cache", kind: "redis.user" }],
      },
    ]);
    expect(applied.ok, JSON.stringify(applied)).toBe(true);
    await mesh.waitForState("app", "Ready", 60_000);
    const holders = { "node-a/api": () => binding(join(mesh.bindingsRoot, "node-a"), "api"), "node-b/worker": () => binding(bindingsB, "worker") };

    // Holders log in with what their agents wrote, every 50 ms.
    const failures: string[] = [];
    let logins = 0;
    let running = true;
    const loops = Object.entries(holders).map(async ([holder, read]) => {
      while (running) {
        const b = read();
        const r = await login.login({ bindings: b });
        if (r.ok) logins++;
        else failures.push(`${holder} as ${b.username} at ${new Date().toISOString()}: ${r.message}`);
        await new Promise((res) => setTimeout(res, 50));
      }
    });

    const key = keys.grant("app", "cache");
    let g1: BindingValues | undefined;
    const record = async () => (await readJson(mesh.store.kv.rotations, key, Rotation))?.value;
    try {
      await waitFor("logins from both holders", () => logins >= 10 || failures.length > 0);

      g1 = binding(bindingsB, "worker");
      // The partition: node-b's agent is cut off from every server.
      for (const b of natsBridges) await b.close();
      natsBridges = [];
      expect(await Promise.all(cluster.members.map((m) => ns.canConnect(m.port)))).toEqual([false, false, false]);
      const started = await rotator.rotate({ grant: "app/cache" });
      expect(started).toMatchObject({ from: 1, to: 2 });
      // node-a's holder confirms; node-b's cannot, and the rotation waits for it with generation 1 kept.
      const waiting = await waitFor(
        "node-a confirmed, node-b awaited",
        async () => {
          const r = await record();
          return r && r.state === RotationStates.AwaitingHolders && (r.confirmed ?? 0) >= 1 ? r : undefined;
        },
        30_000,
        200,
      );
      expect(Object.keys(waiting.holders).sort()).toEqual(["node-a/api", "node-b/worker"]);
      await new Promise((r) => setTimeout(r, 5_000));
      expect((await record())?.state).toBe(RotationStates.AwaitingHolders);
      expect(binding(bindingsB, "worker").password).toBe(g1.password);
      expect((await login.login({ bindings: binding(bindingsB, "worker") })).ok).toBe(true);

      // The partition ends.
      natsBridges = await Promise.all(cluster.members.map((m) => ns.bridge(m.port)));
      const healedAt = Date.now();
      const done = await waitFor("the rotation to commit after the reconnect", async () => {
        const r = await record();
        return r?.state === RotationStates.Committed ? r : undefined;
      }, 60_000, 100).catch((e: Error) => {
        throw new Error(`${e.message}\nnode-b's agent printed:\n${agentB.output().slice(-8_000)}`);
      });
      const resumeMs = Date.now() - healedAt;
      printResume("node-b's agent partitioned from the cluster during a rotation (it committed once the agent could reach the cluster again)", resumeMs);
      expect(resumeMs).toBeLessThanOrEqual(30_000);
      expect(done.id).toBe(started.id);
      expect(Object.values(done.holders).every((h) => h.c !== undefined)).toBe(true);
      await waitFor("a few more logins after the commit", async () => {
        const n = logins;
        await new Promise((r) => setTimeout(r, 500));
        return logins > n + 5 || failures.length > 0;
      });
    } finally {
      running = false;
      await Promise.all(loops);
    }
    expect(failures).toEqual([]);
    // Both holders are on generation 2; generation 1 no longer logs in.
    const b2 = binding(bindingsB, "worker");
    expect(b2.password).not.toBe(g1!.password);
    expect(binding(join(mesh.bindingsRoot, "node-a"), "api").password).toBe(b2.password);
    expect(await login.login({ bindings: g1! })).toMatchObject({ ok: false, reason: "rejected" });
    const g = await mesh.grant("app", "cache");
    expect(g?.generation).toBe(2);
    expect(g?.holders["node-b/worker"]?.generation).toBe(2);
    await mesh.waitForState("app", "Ready", 30_000);
    // Generations consecutive with values of their own, one rotation per id, none committed before its holders confirmed.
    expect(await grantInvariants(mesh.store, { masterKey: mesh.masterKey }, "app", "cache")).toEqual([]);
  }, 300_000);
});
