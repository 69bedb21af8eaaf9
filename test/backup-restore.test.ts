/**
 * `meshctl backup` and `meshctl restore` against a mesh of real services on a nats-server of the
 * test's own, with a Redis of its own as a provider: a backup taken while rotations run, two
 * rotations after it, the server and its store gone, the backup restored onto a fresh server
 * and the services started there: every grant is verified, the one whose generation was retired
 * since is named and repaired, the holder's credential of the backup's moment logs in again,
 * and nothing is left running.
 */
import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Redis } from "ioredis";
import { Kinds, RotationStates, Rotation, keys, parseMasterKey, type ModuleDoc, type ProviderDoc } from "@mesh/shared";
import { connectNats, readJson } from "@mesh/shared/runtime";
import type { Rotator } from "@mesh/rotator";
import { ExitCodes, bufferOutput, readBackupHeader, readBackupKey, runBackup, runRestore, sealBackup, stateDirsOf } from "../packages/cli/src/index.js";
import { startTestMesh, startMeshRotator, rotateCommitted, type TestMesh } from "./mesh.js";
import { startNatsServer } from "./harness/nats-server.js";
import { startOwnRedis, type OwnRedis } from "./harness/redis.js";
import { checkedAfter, waitVerified } from "./verify-helpers.js";
import { waitFor } from "./harness/wait.js";

let dir: string;
let redis: OwnRedis;
let env: NodeJS.ProcessEnv;
const stops: Array<() => Promise<unknown>> = [];

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "mesh-backup-"));
  redis = await startOwnRedis();
  env = { ...process.env, BACKUP_REDIS_PASSWORD: redis.adminPassword };
});
afterAll(async () => {
  for (const stop of stops.reverse()) await stop().catch(() => undefined);
  await redis?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const provider = (): ProviderDoc => ({
  kind: "Provider",
  name: "backup-redis",
  serves: [Kinds.RedisUser],
  node: "node-a",
  endpoint: redis.endpoint,
  admin: { username: redis.adminUser, passwordEnv: "BACKUP_REDIS_PASSWORD" },
  installed: true,
});
const app: ModuleDoc = {
  kind: "Module",
  name: "bk-app",
  parts: [{ name: "api", node: "node-a", installed: true }],
  requires: [
    { name: "cache", kind: "redis.user" },
    { name: "key", kind: "secret" },
  ],
};

/** The Redis binding the agent delivered to `mesh`'s part api. */
const cacheBinding = (mesh: TestMesh) => {
  const at = join(mesh.bindingsRoot, "node-a", "bk-app", "api", "cache");
  return { username: readFileSync(join(at, "username"), "utf8"), password: readFileSync(join(at, "password"), "utf8") };
};

/** Whether Redis takes `b` (a login and a PING), within 5 s: ioredis is told not to reconnect, and a login that hangs is a no. */
async function logsIn(b: { username: string; password: string }): Promise<boolean> {
  const r = new Redis({
    host: "127.0.0.1",
    port: redis.port,
    username: b.username,
    password: b.password,
    lazyConnect: true,
    enableReadyCheck: false,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    connectTimeout: 3_000,
  });
  r.on("error", () => {});
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), 5_000)));
  try {
    return await Promise.race([r.connect().then(async () => (await r.ping()) === "PONG"), late]);
  } catch {
    return false;
  } finally {
    clearTimeout(timer);
    r.disconnect();
  }
}

async function withRotator(mesh: TestMesh): Promise<Rotator> {
  const rotator = await startMeshRotator(mesh, env);
  stops.push(() => rotator.stop());
  return rotator;
}

describe("a backup of the mesh", () => {
  // Its steps' own bounds add up to past the default timeout; each says when it is done, so a timeout names the step it stopped in.
  it(
    "taken while rotations run, restored onto a fresh server once the store is gone: every grant verified, what diverged since repaired, the holder's credential logs in",
    { timeout: 240_000 },
    async () => {
      const began = Date.now();
      const step = (what: string) => console.log(`[backup] ${what}, ${((Date.now() - began) / 1000).toFixed(1)} s in`);
      const first = await startTestMesh({ env, verifier: {} });
      stops.push(() => first.stop());
      const firstRotator = await withRotator(first);
      expect((await first.apply([provider(), app])).ok).toBe(true);
      await first.waitForState("bk-app", "Ready", 30_000);
      await rotateCommitted(first, "bk-app/cache", 2);
      step("the first mesh Ready, its cache at generation 2");

      // Rotations of the secret all through the backup: generations staged, committed and retired while it is taken.
      let rotating = true;
      const rotations = (async () => {
        for (let to = 2; rotating; to++) await rotateCommitted(first, "bk-app/key", to, 20_000);
      })();
      const keyFile = join(dir, "backup.key");
      writeFileSync(keyFile, randomBytes(32).toString("hex") + "\n", { mode: 0o600 });
      const file = join(dir, "mesh.backup");
      const out = bufferOutput();
      try {
        await new Promise((r) => setTimeout(r, 300));
        expect(
          await runBackup(
            first.nc,
            { file, key: readBackupKey(keyFile), masterKey: first.masterKey, dirs: stateDirsOf(join(dir, "first")), meshVersion: "test" },
            out,
          ),
        ).toBe(ExitCodes.Ok);
      } finally {
        rotating = false;
        await rotations;
      }
      step("backed up, the rotations stopped");
      expect(out.stdout).toContain("the master key, encrypted under key");
      expect(statSync(file).mode & 0o777).toBe(0o600);
      // What the file says of itself without its key: no secret, every stream of the mesh.
      const { header } = readBackupHeader(file, readFileSync(file));
      expect(header.streams.map((s) => s.name)).toEqual(expect.arrayContaining(["KV_mesh-grants", "KV_mesh-credentials", "MESH_AUDIT", "MESH_HOLD_N_node-a"]));
      expect(header.streams.at(-1)?.name).toBe("KV_mesh-credentials");
      expect(readFileSync(file).includes(Buffer.from(first.masterKey.key.toString("hex")))).toBe(false);

      const held = cacheBinding(first);
      const heldGeneration = (await first.grant("bk-app", "cache"))!.generation;
      expect(await logsIn(held)).toBe(true);
      // Two rotations after the backup: the generation it holds is retired on the server, so the backup is an older one now.
      await rotateCommitted(first, "bk-app/cache", heldGeneration + 1);
      await rotateCommitted(first, "bk-app/cache", heldGeneration + 2);
      await waitFor("the backup's generation to be retired on the server", async () => !(await logsIn(held)), 30_000);
      step("two rotations after the backup, its generation retired");
      // The mesh and its server go, the store with them.
      await firstRotator.stop();
      await first.stop();
      step("the first mesh and its server stopped");

      const fresh = await startNatsServer();
      const nc = await connectNats(fresh.url, {});
      const masterKeyFile = join(dir, "restored", "master.key");
      const restoredOut = bufferOutput();
      try {
        expect(await runRestore(nc, { file, key: readBackupKey(keyFile), masterKeyFile, dirs: stateDirsOf(join(dir, "restored")) }, restoredOut)).toBe(
          ExitCodes.Ok,
        );
        // Onto a server that holds the mesh now: refused, naming what is there.
        await expect(
          runRestore(nc, { file, key: readBackupKey(keyFile), masterKeyFile, dirs: stateDirsOf(join(dir, "restored")) }, bufferOutput()),
        ).rejects.toThrow(/already holds \d+ of the backup's streams/);
      } finally {
        await nc.close();
      }
      step("restored");
      expect(statSync(masterKeyFile).mode & 0o777).toBe(0o600);
      const masterKey = parseMasterKey(readFileSync(masterKeyFile, "utf8"));
      expect(masterKey.id).toBe(first.masterKey.id);

      const restoredAt = new Date().toISOString();
      const restored = await startTestMesh({ nats: fresh, env, verifier: {}, masterKey });
      stops.push(() => restored.stop());
      await withRotator(restored);
      // Checked anew against the world by the restored mesh's verifier, not only as the backup recorded it: the secret
      // as it was, the Redis user diverged from the backup (its generation retired since), named and repaired.
      await checkedAfter(restored, "bk-app", "key", restoredAt, 30_000);
      await waitVerified(restored, "bk-app", "key", (c) => c.status === "True", "verified after the restore", 30_000);
      step("the secret verified anew");
      const repair = await waitFor(
        "the cache grant's repair",
        async () => (await restored.grant("bk-app", "cache"))?.repairs?.find((r) => r.at > restoredAt && r.outcome === "repaired"),
        30_000,
      );
      // Retiring a Redis generation deletes its user: the restored generation is made again, with its recorded password.
      expect(repair).toMatchObject({ generation: heldGeneration, action: "recreate" });
      await waitVerified(restored, "bk-app", "cache", (c) => c.status === "True", "verified after its repair", 30_000);
      expect((await restored.grant("bk-app", "cache"))!.generation).toBe(heldGeneration);
      expect(await logsIn(held)).toBe(true);
      step("the cache repaired, its binding logs in");
      await restored.waitForState("bk-app", "Ready", 30_000);
      // A rotation the backup caught running is carried to its end, whether or not the holder stream's snapshot (taken before
      // the rotations') holds its broadcast: published again when it does not. The holder's binding is delivered again from the restored store.
      await waitFor(
        "the secret's rotation to be Committed",
        async () => (await readJson(restored.store.kv.rotations, keys.grant("bk-app", "key"), Rotation))?.value.state === RotationStates.Committed,
        60_000,
      );
      await waitFor("the agent to deliver the cache binding again", async () => (await logsIn(cacheBinding(restored))) || undefined, 30_000);
    },
  );

  it("of a cluster is refused by a server alone before anything is restored, saying so", async () => {
    const one = await startNatsServer();
    stops.push(() => one.stop());
    const key = parseMasterKey(randomBytes(32).toString("hex"));
    const file = join(dir, "cluster.backup");
    const snap = { config: { name: "KV_mesh-grants", num_replicas: 3 } as never, state: { messages: 0 } as never, data: new Uint8Array() };
    writeFileSync(
      file,
      sealBackup(key, { createdAt: "", meshVersion: "test", recordVersion: 1, streams: [] }, { streams: [snap], files: [], masterKey: "ab".repeat(32) }),
    );
    const masterKeyFile = join(dir, "cluster", "master.key");
    const nc = await connectNats(one.url, {});
    try {
      await expect(runRestore(nc, { file, key, masterKeyFile, dirs: stateDirsOf(join(dir, "cluster")) }, bufferOutput())).rejects.toThrow(
        /were kept on a cluster \(KV_mesh-grants at 3 replicas\), and this server is not in a cluster of three: restore it onto a cluster/,
      );
    } finally {
      await nc.close();
    }
    expect(existsSync(masterKeyFile)).toBe(false);
  });
});
