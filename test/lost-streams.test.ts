/**
 * A nats-server that lost the mesh's streams while it runs (Debian's 2.9.10 after a reload that
 * read its configuration half-written, then a good one: test/nats-config-reload.test.ts shows the
 * server's side): JetStream answers, every stream of the account is "not found", and only a
 * restart brings them back from the store, which is whole. meshctl says so at once, and what to
 * do, instead of retrying for its whole deadline as it would for a cluster placing a stream.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { Kinds, Rotation, RotationStates, keys, type ModuleDoc } from "@mesh/shared";
import { lostStream, readJson } from "@mesh/shared/runtime";
import { createLogger } from "@mesh/shared/service";
import { startRotator, type Rotator } from "@mesh/rotator";
import { startNatsServer, writeServerConfig, type NatsServer } from "./harness/nats-server.js";
import { startPlainCluster } from "./harness/nats-cluster.js";
import { runMeshctl } from "./harness/bootstrapped-mesh.js";
import { startTestMesh, type TestMesh } from "./mesh.js";
import { waitFor } from "./harness/wait.js";

describe("a server that lost the mesh's streams", () => {
  let dir: string;
  let nats: NatsServer;
  let mesh: TestMesh;
  let rotator: Rotator;
  let configFile: string;
  let config: string;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "mesh-lost-streams-"));
    const storeDir = join(dir, "store");
    configFile = join(dir, "server.conf");
    // With users: 2.9.10 swaps the account object on a reload only when authorization is configured.
    config = `jetstream { store_dir: ${JSON.stringify(storeDir)} }\nauthorization { users: [ { user: mesh, password: pw } ] }\n`;
    writeServerConfig(configFile, config);
    nats = await startNatsServer({ configFile, storeDir });
    mesh = await startTestMesh({ nats, auth: { user: "mesh", pass: "pw" } });
    rotator = await startRotator({ store: mesh.store, masterKey: mesh.masterKey, log: createLogger("rotator", { destination: mesh.logs, level: "debug" }) });
  }, 60_000);
  afterAll(async () => {
    await rotator?.stop();
    await mesh?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const meshctl = (args: string[]) =>
    runMeshctl(
      tmpdir(),
      args,
      { ...process.env, NO_COLOR: "1", NATS_URL: nats.url, MESH_NATS_CREDENTIALS: "", MESH_NATS_USER: "mesh", MESH_NATS_PASSWORD: "pw" },
      120_000,
    );

  /** Writes `text`, sends SIGHUP, and waits until the server has applied it (its config load time moved). */
  async function reload(text: string): Promise<void> {
    const loadedAt = async () => ((await (await fetch(`http://127.0.0.1:${nats.monitorPort}/varz`)).json()) as { config_load_time: string }).config_load_time;
    const before = await loadedAt();
    writeServerConfig(configFile, text);
    process.kill(nats.pid, "SIGHUP");
    await waitFor("the reload to be applied", async () => (await loadedAt()) !== before, 10_000);
  }

  it("meshctl rotate --wait says the server lost its streams and to restart it, before its deadline; after a restart the rotation commits", async () => {
    const app: ModuleDoc = {
      kind: "Module",
      name: "app",
      parts: [{ name: "api", node: "node-a", installed: true }],
      requires: [{ name: "key", kind: Kinds.Secret }],
    };
    expect((await mesh.apply([app])).ok).toBe(true);
    await mesh.waitForState("app", "Ready");

    // A reload that read the configuration empty, then one that read it whole.
    await reload("");
    await reload(config);
    const r = await meshctl(["rotate", "app/key", "--wait", "--timeout", "120s"]);
    const returnedAt = Date.now();
    expect(r.code, r.stdout + r.stderr).toBe(1);
    expect(r.stderr).toContain(`the NATS server at ${nats.url.replace("nats://", "")} lost the mesh's streams while it runs`);
    expect(r.stderr).toContain("Restart nats-server");
    expect(r.stderr).not.toContain("no outcome");
    const rotation = (await readJson(mesh.store.kv.rotations, keys.grant("app", "key"), Rotation))!.value;
    expect(rotation).toMatchObject({ state: RotationStates.Staged, blocked: { reason: "StreamsLost" } });
    // Said while the rotation still had its time: the command did not wait for the deadline.
    expect(returnedAt).toBeLessThan(Date.parse(rotation.deadline));

    // The restart brings the streams back from the store, and the rotation goes on by itself.
    await nats.stop({ keepStore: true });
    await nats.restart();
    const committed = await waitFor(
      "the rotation committed after the restart",
      async () => {
        const x = (await readJson(mesh.store.kv.rotations, keys.grant("app", "key"), Rotation).catch(() => undefined))?.value;
        return x?.state === RotationStates.Committed ? x : undefined;
      },
      60_000,
    );
    expect(committed.blocked).toBeUndefined();
  }, 180_000);

  it("a stream missing on a server of a cluster is not called lost (it may be being placed); on one server it is", async () => {
    const cluster = await startPlainCluster({ size: 3 });
    const nc = await connect({ servers: cluster.url });
    try {
      const jsm = await waitFor("JetStream on the cluster", () => jetstreamManager(nc, { timeout: 2_000 }).catch(() => undefined), 30_000);
      expect(nc.info?.cluster).toBeTruthy();
      expect(await lostStream(nc, jsm, "NEVER_MADE")).toBeUndefined();
    } finally {
      await nc.close();
      await cluster.stop();
    }
    const e = await lostStream(mesh.nc, mesh.store.jsm, "NEVER_MADE");
    expect(e?.code).toBe("StreamsLost");
    expect(e?.message).toContain("NEVER_MADE: stream not found");
  }, 120_000);
});
