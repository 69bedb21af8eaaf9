/**
 * An operator who points NATS_URL at a three-server cluster of their own, without
 * authentication, and runs `meshctl up` on it (every bucket and stream R3): `meshctl rotate
 * --wait`, started as the JetStream meta leader is SIGKILLed, rides out the election within its
 * own deadline and commits; the module stays Ready and its holder is on the new generation.
 * (test/cluster/rotation-leader-kill.test.ts does the same in operator mode, with logins.)
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { jetstreamManager } from "@nats-io/jetstream";
import { connectNats, openStore, type NatsConnection, type Store } from "@mesh/shared/runtime";
import { meshctlBin, runMeshctl } from "../harness/bootstrapped-mesh.js";
import { startPlainCluster, type PlainCluster } from "../harness/nats-cluster.js";
import { endProcess } from "../harness/processes.js";
import { waitFor } from "../harness/wait.js";
import { allReady, generationOf } from "./mesh-on-cluster.js";

const app = "kind: Module\nname: app\nparts:\n  - { name: api, node: node-a, installed: true }\nrequires:\n  - { name: token, kind: secret }\n";

describe("meshctl on a cluster without authentication", () => {
  let cluster: PlainCluster;
  let cwd: string;
  let up: ChildProcess | undefined;
  let out = "";
  let nc: NatsConnection;
  let store: Store;
  /** The environment of an operator's shell whose NATS_URL names the cluster. */
  let env: NodeJS.ProcessEnv;

  beforeAll(async () => {
    cluster = await startPlainCluster({ size: 3 });
    cwd = mkdtempSync(join(tmpdir(), "mesh-election-"));
    writeFileSync(join(cwd, "app.yaml"), app);
    env = {
      ...process.env,
      NO_COLOR: "1",
      NATS_URL: cluster.url,
      MESH_NATS_CREDENTIALS: "",
      MESH_NATS_USER: "",
      MESH_MASTER_KEY: "",
      MESH_MASTER_KEY_FILE: "",
    };
    up = spawn(process.execPath, [meshctlBin, "up", "--nodes", "node-a", "-f", "app.yaml"], { cwd, env, stdio: ["ignore", "pipe", "pipe"] });
    up.stdout!.on("data", (d: Buffer) => (out += d.toString()));
    up.stderr!.on("data", (d: Buffer) => (out += d.toString()));
    await waitFor("app Ready in up's output", () => /\bapp Ready\b/.test(out), 150_000).catch((e: unknown) => {
      throw new Error(`${(e as Error).message}\n--- up printed:\n${out}`);
    });
    nc = await connectNats(cluster.url);
    store = await openStore(nc);
  }, 300_000);

  afterAll(async () => {
    await nc?.close().catch(() => undefined);
    if (up) await endProcess(up, 15_000);
    await cluster?.stop();
    if (cwd) rmSync(cwd, { recursive: true, force: true });
  });

  it("runs the mesh on all three servers, unauthenticated, saying so", async () => {
    expect(out).toContain(`using the NATS server at ${cluster.url}`);
    expect(out).toContain(`has no authentication: anyone who can reach it can take every credential`);
    const si = await (await jetstreamManager(nc)).streams.info("KV_mesh-grants");
    expect(si.config.num_replicas).toBe(3);
  });

  it("rotate --wait, started as the meta leader is SIGKILLed, rides out the election and commits", async () => {
    const from = await generationOf(store, "app", "token");
    expect(from).toBeGreaterThanOrEqual(1);
    const binding = join(cwd, ".mesh/bindings/node-a/app/api/token/value");
    const old = readFileSync(binding, "utf8");
    const meta = await cluster.metaLeader();
    // The command starts first, so the kill lands while it connects and opens the store.
    const rotate = runMeshctl(cwd, ["rotate", "app/token", "--wait", "--timeout", "90s", "--json"], env, 180_000);
    await meta.kill();
    await new Promise((r) => setTimeout(r, 2_000));
    await meta.restart();
    const r = await rotate;
    console.log(`[cluster] meshctl rotate across the meta leader's SIGKILL (no authentication) said on stderr: ${JSON.stringify(r.stderr)}`);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).not.toContain("restart the server with -js");
    expect(JSON.parse(r.stdout)).toMatchObject({ state: "Committed", from, to: from + 1 });
    await waitFor("the holder's binding on the new generation", () => readFileSync(binding, "utf8") !== old, 10_000);
    // Its Delivered condition follows the agent's receipt of the new generation, folded a moment after the file is written.
    await allReady(store, ["app"], 30_000);
    const status = await waitFor(
      "meshctl status to show app Ready",
      async () => {
        const s = await runMeshctl(cwd, ["status", "app", "--json"], env);
        return s.code === 0 && s.stdout.includes('"Ready"') ? s : undefined;
      },
      30_000,
      500,
    );
    expect(status.stdout).toContain('"Ready"');
  });
});
