/**
 * The self-hosting transition: a requirement satisfied by a bootstrap provider moves to a
 * provider installed later that is preferred. The resolver re-resolves, the new resource is
 * made, every holder moves over through the rotation fan-out (a node agent and an SDK holder
 * that confirms only when the test lets it), and the old resource is released only after
 * every holder confirmed.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { connect } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { Rotation, createLogger, keys, readJson, type NatsConnection } from "@mesh/shared";
import { holdCredential, type HeldCredential } from "@mesh/client";
import { startRotator, type Rotator } from "@mesh/rotator";
import { startTestMesh, type TestMesh } from "./mesh.js";
import { startNatsServer, type NatsServer } from "./harness/nats-server.js";
import { waitFor } from "./harness/wait.js";

/** Whether the JetStream of the server at `url` has stream `name`. */
async function hasStream(url: string, name: string): Promise<boolean> {
  const nc = await connect({ servers: url });
  try {
    const jsm = await jetstreamManager(nc);
    return await jsm.streams.info(name).then(
      () => true,
      () => false,
    );
  } finally {
    await nc.close();
  }
}

describe("handing a grant over to a preferred provider", () => {
  let mesh: TestMesh;
  let rotator: Rotator;
  let later: NatsServer;
  let sdk: NatsConnection;

  beforeAll(async () => {
    mesh = await startTestMesh({ nodes: ["node-a", "node-b"] });
    rotator = await startRotator({ store: mesh.store, masterKey: mesh.masterKey, log: createLogger("rotator", { destination: mesh.logs, level: "debug" }), sweepMs: 500 });
    later = await startNatsServer();
  }, 60_000);
  afterAll(async () => {
    await sdk?.close();
    await rotator?.stop();
    await mesh?.stop();
    await later?.stop();
  });

  it("moves every holder to the new provider and releases the old resource only after all confirmed", async () => {
    const boot = { kind: "Provider", name: "boot-kv", serves: ["kv.bucket"], node: "node-a", endpoint: mesh.nats.url };
    const app = {
      kind: "Module",
      name: "app",
      parts: [
        { name: "api", node: "node-a" },
        { name: "worker", node: "node-b" },
        { name: "web", node: "node-a" },
      ],
      requires: [{ name: "cache", kind: "kv.bucket" }],
    };
    expect((await mesh.apply([boot, app])).ok).toBe(true);
    await waitFor("generation 1 provisioned", async () => ((await mesh.grant("app", "cache"))?.generation ?? 0) >= 1);

    // Part web is also held by an SDK instance (the application's own process), which confirms only when the test says so.
    sdk = await connect({ servers: mesh.nats.url });
    const held = await holdCredential(sdk, { module: "app", part: "web", requirement: "cache", node: "node-a", instance: "i1" });
    const updates: HeldCredential[] = [];
    let confirmNow!: () => void;
    const mayConfirm = new Promise<void>((r) => (confirmNow = r));
    void (async () => {
      for await (const u of held) {
        updates.push(u);
        if (u.rotation) {
          await mayConfirm;
          await u.confirm();
        }
      }
    })();
    await waitFor("the SDK holder on generation 1", () => updates.some((u) => u.generation === 1));
    await mesh.waitForState("app", "Ready");
    const bucketFile = (node: string, part: string, key: string) => readFileSync(join(mesh.bindingsRoot, node, "app", part, "cache", key), "utf8");
    expect(bucketFile("node-a", "api", "port")).toBe(String(mesh.nats.port));
    expect(await hasStream(mesh.nats.url, "KV_app_cache")).toBe(true);

    // The store installed later, preferred.
    const store = { kind: "Provider", name: "store-kv", serves: ["kv.bucket"], node: "node-b", endpoint: later.url, preference: 10 };
    expect((await mesh.apply([store])).ok).toBe(true);

    const key = keys.grant("app", "cache");
    const waiting = await waitFor(
      "a handover rotation waiting for the SDK holder",
      async () => {
        const r = (await readJson(mesh.store.kv.rotations, key, Rotation))?.value;
        const confirmedAgents = r && ["node-a/api", "node-a/web", "node-b/worker"].every((h) => r.holders[h]?.c !== undefined);
        return r?.trigger === "handover" && confirmedAgents ? r : undefined;
      },
      30_000,
    );
    expect(waiting).toMatchObject({ fromProvider: "boot-kv", provider: "store-kv", from: 1, to: 2 });
    expect(waiting.state).not.toBe("Committed");
    // Both resources exist while a holder is still on the old one; the agents' holders moved.
    expect(await hasStream(later.url, "KV_app_cache")).toBe(true);
    expect(await hasStream(mesh.nats.url, "KV_app_cache")).toBe(true);
    expect(bucketFile("node-a", "api", "port")).toBe(String(later.port));
    expect(bucketFile("node-b", "worker", "uri")).toBe(`nats://127.0.0.1:${later.port}`);
    expect(updates.at(-1)).toMatchObject({ generation: 2 });

    confirmNow();
    const committed = await waitFor(
      "the handover to commit",
      async () => {
        const r = (await readJson(mesh.store.kv.rotations, key, Rotation))?.value;
        return r?.state === "Committed" ? r : undefined;
      },
      30_000,
    );
    expect(Object.keys(committed.holders).sort()).toEqual(["node-a/api", "node-a/web", "node-a/web/i1", "node-b/worker"]);
    await waitFor("the old bucket released on the bootstrap provider", async () => !(await hasStream(mesh.nats.url, "KV_app_cache")) || undefined, 10_000);
    expect(await hasStream(later.url, "KV_app_cache")).toBe(true);
    const g = (await mesh.grant("app", "cache"))!;
    expect(g).toMatchObject({ provider: "store-kv", generation: 2, resource: { provider: "store-kv" } });
    await mesh.waitForState("app", "Ready");
  }, 90_000);
});
