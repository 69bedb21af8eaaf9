/**
 * The frozen admin password for every kind whose admin can be a mesh secret besides PostgreSQL
 * (test/frozen-admin-password.test.ts): MariaDB's root, a Redis admin user, a RabbitMQ
 * administrator. Each server is the test's own, its admin initialised with generation 1 of the
 * mesh secret `db/admin-password` that module `db`'s part holds; the provider reads it from the
 * binding file the agent writes (docs/bootstrap.md, "Provider dependencies").
 *
 * - the secret rotated (the server gets generation 2 before its holders are told), then the
 *   server's admin set back to generation 1 (MariaDB: the module's own server, its data directory
 *   restored from a copy made at generation 1; the others by the test's own client, as a restore
 *   would leave it): the verifier says
 *   `CredentialDiverged` naming both, repairs it, and a new module served by it becomes Ready;
 * - the same divergence met by a take-back, before any verifier looks: the provisioner goes
 *   through the same engine, repairs it and revokes.
 *
 * MariaDB and Redis are servers the test starts (its own `mariadbd` with a data directory from
 * `mariadb-install-db`, its own `redis-server`); RabbitMQ is the test run's own node
 * (test/global-setup.ts), with an administrator made for each test.
 */
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterEach, describe, expect, it } from "vitest";
import { Redis } from "ioredis";
import { getCondition, Grant, keys, Kinds, Rotation, RotationStates, type Kind, type ModuleDoc, type ProviderDoc } from "@mesh/shared";
import { readJson } from "@mesh/shared/runtime";
import { createLogger } from "@mesh/shared/service";
import { createAdapter, CredentialStore } from "@mesh/providers";
import { startAgent, type Agent } from "@mesh/agent";
import { startRotator, type Rotator } from "@mesh/rotator";
import { startOwnMariadb } from "./harness/mariadb.js";
import { startOwnRedis } from "./harness/redis.js";
import { startTestMesh, type TestMesh } from "./mesh.js";
import { waitFor } from "./harness/wait.js";
import { stopInOrder } from "./harness/teardown.js";

const run = promisify(execFile);
const SECRET = "db/admin-password";

/** A server of the test's own whose admin password the test can set behind the mesh's back. */
interface AdminServer {
  endpoint: string;
  adminUser: string;
  options?: ProviderDoc["options"];
  /** Keeps what the server holds now, for `setBack` to bring back (a server whose data directory is copied). */
  snapshot?(): Promise<void>;
  /** Sets the admin's password from `current` back to `old`: the snapshot restored, or the test's own client. */
  setBack(current: string, old: string): Promise<void>;
  /** Whether the admin logs in with `password` now (the test's own client). */
  accepts(password: string): Promise<boolean>;
  stop(): Promise<void>;
}

const RABBITMQ = {
  amqpPort: Number(process.env.RABBITMQ_TEST_AMQP_PORT ?? 5672),
  managementUrl: process.env.RABBITMQ_TEST_MANAGEMENT_URL ?? "http://127.0.0.1:15672",
  root: { user: process.env.RABBITMQ_TEST_USER ?? "guest", password: process.env.RABBITMQ_TEST_PASSWORD ?? "guest" },
};

/** A management API request as `as`; its HTTP status. */
async function rabbitmqApi(method: string, path: string, as: { user: string; password: string }, body?: unknown): Promise<number> {
  const res = await fetch(`${RABBITMQ.managementUrl}/api${path}`, {
    method,
    headers: { authorization: `Basic ${Buffer.from(`${as.user}:${as.password}`).toString("base64")}`, "content-type": "application/json" },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    signal: AbortSignal.timeout(5_000),
  });
  await res.text();
  return res.status;
}

/** A Redis client authenticated as `user` with `password`, failing at once rather than retrying. */
async function redisAs(port: number, user: string, password: string): Promise<Redis> {
  const c = new Redis({ host: "127.0.0.1", port, lazyConnect: true, enableReadyCheck: false, retryStrategy: () => null, maxRetriesPerRequest: 0 });
  c.on("error", () => {});
  await c.connect();
  try {
    await c.call("AUTH", user, password);
    return c;
  } catch (e) {
    c.disconnect();
    throw e;
  }
}

/** How each kind's server is started with generation 1 as its admin's password. */
const SERVERS: Array<{ kind: Kind; start(generation1: string): Promise<AdminServer> }> = [
  {
    kind: Kinds.MariadbDatabase,
    // The module's own server: its data directory is copied at generation 1, and that copy comes back.
    start: async (generation1) => {
      const s = await startOwnMariadb({ adminPassword: generation1 });
      const copy = join(s.dataDir, "..", "copy");
      const accepts = async (password: string) => {
        const c = await s.connect(password).catch(() => undefined);
        await c?.end();
        return c !== undefined;
      };
      return {
        endpoint: s.endpoint,
        adminUser: s.adminUser,
        accepts,
        snapshot: async () => {
          await s.stop({ keepData: true });
          await run("cp", ["-a", s.dataDir, copy]);
          await s.start();
        },
        setBack: async () => {
          await s.stop({ keepData: true });
          await run("rm", ["-rf", s.dataDir]);
          await run("cp", ["-a", copy, s.dataDir]);
          await s.start();
        },
        stop: () => s.stop(),
      };
    },
  },
  {
    kind: Kinds.RedisUser,
    start: async (generation1) => {
      const s = await startOwnRedis({ adminPassword: generation1 });
      return {
        endpoint: s.endpoint,
        adminUser: s.adminUser,
        accepts: async (password) => {
          const c = await redisAs(s.port, s.adminUser, password).catch(() => undefined);
          c?.disconnect();
          return c !== undefined;
        },
        setBack: async (current, old) => {
          const c = await redisAs(s.port, s.adminUser, current);
          await c.call("ACL", "SETUSER", s.adminUser, "resetpass", `>${old}`);
          await c.call("ACL", "SAVE");
          c.disconnect();
        },
        stop: () => s.stop(),
      };
    },
  },
  {
    kind: Kinds.RabbitmqVhost,
    start: async (generation1) => {
      const user = `frozen_admin_${randomBytes(4).toString("hex")}`;
      expect(await rabbitmqApi("PUT", `/users/${user}`, RABBITMQ.root, { password: generation1, tags: ["administrator"] })).toBe(201);
      return {
        endpoint: `amqp://127.0.0.1:${RABBITMQ.amqpPort}`,
        adminUser: user,
        options: { managementUrl: RABBITMQ.managementUrl },
        accepts: async (password) => (await rabbitmqApi("GET", "/whoami", { user, password })) === 200,
        setBack: async (current, old) => {
          expect(await rabbitmqApi("PUT", `/users/${user}`, { user, password: current }, { password: old, tags: ["administrator"] })).toBe(204);
        },
        stop: async () => {
          await rabbitmqApi("DELETE", `/users/${user}`, RABBITMQ.root);
        },
      };
    },
  },
];

/** One test's world: a mesh with a verifier, a rotator and node-a's agent, the server, and what to clean up. */
interface World {
  mesh: TestMesh;
  rotator: Rotator;
  agent: Agent;
  server?: AdminServer;
  root: string;
  kind: Kind;
}
let world: World | undefined;

afterEach(async () => {
  const w = world;
  world = undefined;
  if (!w) return;
  await stopInOrder([w.rotator, w.agent, w.mesh, w.server], [w.root]);
});

const dbModule: ModuleDoc = {
  kind: "Module",
  name: "db",
  parts: [{ name: "server", node: "node-a", installed: true }],
  requires: [{ name: "admin-password", kind: Kinds.Secret, repair: "auto" }],
};

const appModule = (name: string, kind: Kind, installed = true): ModuleDoc => ({
  kind: "Module",
  name,
  parts: [{ name: "api", node: "node-a", installed }],
  requires: [{ name: "store", kind }],
});

/** Where the agent of node-a writes db/admin-password's value for part `server`. */
const secretFile = (root: string) => join(root, "node-a", "db", "server", "admin-password", "value");

const providerOf = (kind: Kind, server: AdminServer, root: string): ProviderDoc => ({
  kind: "Provider",
  name: "apps",
  serves: [kind],
  node: "node-a",
  endpoint: server.endpoint,
  admin: { username: server.adminUser, passwordFile: secretFile(root) },
  needs: [SECRET],
  installed: true,
  ...(server.options ? { options: server.options } : {}),
});

/** The provider as a holder's login sees it: where the server is, no admin. */
const loginOnly = (doc: ProviderDoc) => ({ name: doc.name, node: doc.node, endpoint: doc.endpoint, ...(doc.options ? { options: doc.options } : {}) });

/** The value of generation `generation` of db/admin-password, from the credential history. */
async function secretValue(mesh: TestMesh, generation: number): Promise<string> {
  const cred = await new CredentialStore(mesh.store.kv.credentials, mesh.masterKey).read("db", "admin-password", generation);
  return cred!.bindings!.value!;
}

/** Logs in with the current generation of `<module>/store`, as its holder would. */
async function loginGrant(w: World, module: string) {
  const g = await w.mesh.grant(module, "store");
  const cred = await new CredentialStore(w.mesh.store.kv.credentials, w.mesh.masterKey).read(module, "store", g!.generation);
  const adapter = createAdapter(w.kind, loginOnly(providerOf(w.kind, w.server!, w.root)));
  try {
    return await adapter.login({ bindings: cred!.bindings! });
  } finally {
    await adapter.close();
  }
}

/** Every Verified condition the secret's grant has had in KV (its history), oldest first. */
async function verifiedHistory(mesh: TestMesh) {
  const out = [];
  for await (const e of await mesh.store.kv.grants.history({ key: keys.grant("db", "admin-password") })) {
    if (e.operation === "PUT" && e.length > 0) out.push(getCondition(Grant.parse(e.json()).conditions, "Verified"));
  }
  return out;
}

/**
 * A mesh checking each grant every `verifyMs`; module `db` applied and its secret delivered at
 * generation 1; the kind's server with its admin initialised from it; provider `apps`; module
 * `shop` Ready on it.
 */
async function startWorld(kind: Kind, start: (generation1: string) => Promise<AdminServer>, verifyMs: number): Promise<World & { server: AdminServer }> {
  const root = mkdtempSync(join(tmpdir(), "mesh-frozen-kinds-"));
  const env = { ...process.env, MESH_BINDINGS_ROOT: root };
  const mesh = await startTestMesh({ nodes: [], env, bindingsRoot: root, verifier: { intervalMs: verifyMs } });
  const log = (service: string) => createLogger(service, { destination: mesh.logs, level: "debug" });
  const agent = await startAgent({ store: mesh.store, node: "node-a", bindingsRoot: join(root, "node-a"), log: log("agent") });
  const rotator = await startRotator({ store: mesh.store, masterKey: mesh.masterKey, log: log("rotator"), env, sweepMs: 500 });
  const w: World = { mesh, rotator, agent, root, kind };
  world = w;
  expect((await mesh.apply([dbModule])).ok).toBe(true);
  await mesh.waitForState("db", "Ready");
  const generation1 = readFileSync(secretFile(root), "utf8");
  expect(generation1).toBe(await secretValue(mesh, 1));
  w.server = await start(generation1);
  expect((await mesh.apply([providerOf(kind, w.server, root), appModule("shop", kind)])).ok).toBe(true);
  await mesh.waitForState("shop", "Ready", 30_000);
  expect(await loginGrant(w, "shop")).toEqual({ ok: true });
  return w as World & { server: AdminServer };
}

/**
 * Rotates db/admin-password (the server takes generation 2 before the holders are told), waits
 * for the commit and for the binding file, then sets the server back to generation 1 behind the
 * mesh's back. Returns both values.
 */
async function rotateThenSetBack(w: World & { server: AdminServer }): Promise<{ generation1: string; generation2: string }> {
  await w.server.snapshot?.();
  const r = await w.rotator.rotate({ grant: SECRET });
  expect(r).toMatchObject({ from: 1, to: 2 });
  await waitFor(
    "the rotation of db/admin-password committed",
    async () =>
      (await readJson(w.mesh.store.kv.rotations, keys.grant("db", "admin-password"), Rotation))?.value.state === RotationStates.Committed || undefined,
    30_000,
  );
  const [generation1, generation2] = [await secretValue(w.mesh, 1), await secretValue(w.mesh, 2)];
  await waitFor("generation 2 in the binding file", () => readFileSync(secretFile(w.root), "utf8") === generation2 || undefined);
  expect(await w.server.accepts(generation2)).toBe(true);
  // The commit's changes to the grant have the verifier check it once: done before the admin is
  // set back, so that a check in flight (or its confirming second look) does not meet the old
  // password and repair it before the test's own step does.
  await waitFor(
    "the verifier's check of generation 2",
    async () => {
      const v = getCondition((await w.mesh.grant("db", "admin-password"))?.conditions ?? [], "Verified");
      return (v?.status === "True" && v.message.startsWith("generation 2 ")) || undefined;
    },
    15_000,
  );
  await w.server.setBack(generation2, generation1);
  expect(await w.server.accepts(generation1)).toBe(true);
  expect(await w.server.accepts(generation2)).toBe(false);
  return { generation1, generation2 };
}

describe.each(SERVERS)("$kind: a server whose admin is set back to an older generation of its mesh secret", ({ kind, start }) => {
  it("the verifier says CredentialDiverged naming 1 and 2, repairs it, and a new module served by it becomes Ready", async () => {
    const w = await startWorld(kind, start, 1_000);
    const { mesh, server } = w;
    const { generation2 } = await rotateThenSetBack(w);
    const repaired = await waitFor(
      "the repair of db/admin-password",
      async () => (await mesh.grant("db", "admin-password"))?.repairs?.find((r) => r.outcome === "repaired"),
      30_000,
    );
    expect(repaired).toMatchObject({ reason: "CredentialDiverged", generation: 2, action: "reapply" });
    expect(repaired.message).toContain(`the server at ${server.endpoint} accepts generation 1 of db/admin-password; the mesh holds 2`);
    // The diagnosis was the condition first, naming both generations and what the mesh does.
    const diverged = (await verifiedHistory(mesh)).find((c) => c?.reason === "CredentialDiverged");
    expect(diverged).toMatchObject({ status: "False" });
    expect(diverged?.message).toContain("accepts generation 1 of db/admin-password; the mesh holds 2");
    expect(diverged?.message).toContain("the mesh will log in with generation 1 and set generation 2 at the server");

    expect(await server.accepts(generation2)).toBe(true);
    expect((await mesh.apply([appModule("shop-new", kind)])).ok).toBe(true);
    await mesh.waitForState("shop-new", "Ready", 30_000);
    expect(await loginGrant(w, "shop-new")).toEqual({ ok: true });
    expect(await loginGrant(w, "shop")).toEqual({ ok: true });
    await mesh.waitForState("db", "Ready", 15_000);
  }, 120_000);

  it("a take-back meeting the divergence before any verifier: the provisioner repairs it through the same engine and revokes", async () => {
    // The verifier's schedule is far off: the first to need the server is the take-back.
    const w = await startWorld(kind, start, 300_000);
    const { mesh, server } = w;
    const { generation2 } = await rotateThenSetBack(w);
    const b = await new CredentialStore(mesh.store.kv.credentials, mesh.masterKey).read("shop", "store", 1);
    expect((await mesh.apply([appModule("shop", kind, false)])).ok).toBe(true);
    const taken = await waitFor(
      "shop/store taken back",
      async () => {
        const g = await mesh.grant("shop", "store");
        return g === undefined || g.revoked?.done ? (g ?? "deleted") : undefined;
      },
      30_000,
    );
    expect(taken).toBeDefined();
    const repair = (await mesh.grant("db", "admin-password"))?.repairs?.at(-1);
    expect(repair).toMatchObject({ reason: "CredentialDiverged", generation: 2, outcome: "repaired" });
    expect(repair?.by).toMatch(/^provisioner@/);
    expect(await server.accepts(generation2)).toBe(true);
    // Revoked: the holder's credential does not log in any more.
    const adapter = createAdapter(kind, loginOnly(providerOf(kind, server, w.root)));
    try {
      expect(await adapter.login({ bindings: b!.bindings! })).toMatchObject({ ok: false });
    } finally {
      await adapter.close();
    }
  }, 120_000);
});
