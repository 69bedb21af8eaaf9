/**
 * The frozen admin password (docs/design.md, glossary: "diverged"), end to end with a real PostgreSQL (scram-sha-256, its
 * own data directory) run as module `pg`, whose admin password is the mesh secret
 * `pg/admin-password` (docs/bootstrap.md, "Provider dependencies"): provider `pg-apps` reads it from the
 * binding file the agent writes, and serves modules' `postgres.database` requirements.
 *
 * - the secret moves to generation 2 while the server is down, and the server comes back with
 *   its data directory of generation 1: the verifier names both generations, repairs it by
 *   itself, a new module becomes Ready and the existing grant keeps working;
 * - the data directory restored from a copy made at generation 1, after a rotation: the
 *   provisioner, needing the server for a new module, repairs it by itself and carries on;
 * - a rotation of a grant the provider serves meets the server on generation 1: the rotator
 *   repairs it as the provisioner would, and the rotation commits;
 * - a rotation of the secret whose holder is away: the server has generation 2 while the file
 *   keeps 1, and the provisioner reaches the server with 2 from the credential history;
 * - a server whose admin password was set by hand to one the mesh never had: said in words,
 *   nothing repaired, and a rotation of the secret refused before any holder is told;
 * - the same with `repair: report`: nothing changes at the server, and the messages name the
 *   command, which then repairs it;
 * - `meshctl rotate pg/admin-password` while the server runs: the server accepts the new
 *   password before the rotation commits, and no grant it serves fails.
 *
 * Each test has its own mesh (its own nats-server) and its own PostgreSQL.
 */
import { execFile } from "node:child_process";
import { chmodSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterEach, describe, expect, it } from "vitest";
import pg from "pg";
import {
  getCondition,
  Grant,
  keys,
  Kinds,
  parseAllowedHooks,
  Rotation,
  RotationStates,
  Verification,
  type Condition,
  type ModuleDoc,
  type ProviderDoc,
} from "@mesh/shared";
import { readJson } from "@mesh/shared/runtime";
import { createLogger } from "@mesh/shared/service";
import { createAdapter, CredentialStore } from "@mesh/providers";
import { startAgent, type Agent } from "@mesh/agent";
import { startRotator, type Rotator } from "@mesh/rotator";
import { explainModule } from "@mesh/cli";
import { startPostgres, type Postgres } from "./harness/postgres.js";
import { startTestMesh, type TestMesh } from "./mesh.js";
import { waitFor } from "./harness/wait.js";
import { checkedAfter } from "./verify-helpers.js";
import { stopInOrder } from "./harness/teardown.js";

const run = promisify(execFile);
const SECRET = "pg/admin-password";

/** One test's world: a mesh, its rotator and agent, the `pg` module's server, and what to clean up. */
interface World {
  mesh: TestMesh;
  rotator: Rotator;
  agent: Agent;
  db?: Postgres;
  root: string;
  dirs: string[];
}
let world: World | undefined;

afterEach(async () => {
  const w = world;
  world = undefined;
  if (!w) return;
  await stopInOrder([w.rotator, w.agent, w.mesh, w.db], w.dirs);
});

const pgModule = (repair: "auto" | "report", onRotate?: string): ModuleDoc => ({
  kind: "Module",
  name: "pg",
  parts: [{ name: "server", node: "node-a", installed: true, ...(onRotate ? { onRotate } : {}) }],
  requires: [{ name: "admin-password", kind: Kinds.Secret, repair }],
});

const appModule = (name: string): ModuleDoc => ({
  kind: "Module",
  name,
  parts: [{ name: "api", node: "node-a", installed: true }],
  requires: [{ name: "db", kind: Kinds.PostgresDatabase }],
});

/** Where the agent of node-a writes pg/admin-password's value for part `server`. */
const secretFile = (root: string) => join(root, "node-a", "pg", "server", "admin-password", "value");

const pgProvider = (db: Postgres, root: string): ProviderDoc => ({
  kind: "Provider",
  name: "pg-apps",
  serves: ["postgres.database"],
  node: "node-a",
  endpoint: db.endpoint,
  admin: { username: "postgres", passwordFile: secretFile(root) },
  needs: [SECRET],
  installed: true,
});

/**
 * A mesh with a verifier (checking every `verifyMs`), a rotator and node-a's agent (allowed
 * `hooks`); module `pg` applied and its secret delivered at generation 1; a PostgreSQL whose
 * data directory is initialised with that generation; provider pg-apps; module `shop` Ready.
 */
async function startWorld(opts: {
  repair: "auto" | "report";
  verifyMs: number;
  /** The agent's probe interval (its default when left out): a probe that newly fails has the verifier check at once. */
  probeMs?: number;
  onRotate?: string;
  hooks?: string[];
}): Promise<World & { db: Postgres }> {
  const root = mkdtempSync(join(tmpdir(), "mesh-frozen-"));
  const env = { ...process.env, MESH_BINDINGS_ROOT: root };
  const mesh = await startTestMesh({ nodes: [], env, bindingsRoot: root, verifier: { intervalMs: opts.verifyMs } });
  const log = (service: string) => createLogger(service, { destination: mesh.logs, level: "debug" });
  const agent = await startAgent({
    store: mesh.store,
    node: "node-a",
    bindingsRoot: join(root, "node-a"),
    hooks: parseAllowedHooks(opts.hooks ?? []),
    log: log("agent"),
    ...(opts.probeMs ? { probeIntervalMs: opts.probeMs } : {}),
  });
  const rotator = await startRotator({ store: mesh.store, masterKey: mesh.masterKey, log: log("rotator"), env, sweepMs: 500 });
  const w: World = { mesh, rotator, agent, root, dirs: [root] };
  world = w;
  expect((await mesh.apply([pgModule(opts.repair, opts.onRotate)])).ok).toBe(true);
  await mesh.waitForState("pg", "Ready");
  const generation1 = readFileSync(secretFile(root), "utf8");
  expect(generation1).toBe(await secretValue(mesh, 1));
  // The server's data directory is initialised once, with generation 1.
  w.db = await startPostgres({ adminPassword: generation1 });
  expect((await mesh.apply([pgProvider(w.db, root), appModule("shop")])).ok).toBe(true);
  await mesh.waitForState("shop", "Ready", 30_000);
  expect(await loginGrant(mesh, "shop")).toEqual({ ok: true });
  return w as World & { db: Postgres };
}

/** The value of generation `generation` of pg/admin-password, from the credential history. */
async function secretValue(mesh: TestMesh, generation: number): Promise<string> {
  const cred = await new CredentialStore(mesh.store.kv.credentials, mesh.masterKey).read("pg", "admin-password", generation);
  return cred!.bindings!.value!;
}

/** Logs in as `postgres` with `password`: what the server holds. */
async function adminLogin(db: Postgres, password: string): Promise<"accepted" | string> {
  const c = new pg.Client({ host: db.host, port: db.port, user: "postgres", password, database: "postgres", connectionTimeoutMillis: 3_000 });
  c.on("error", () => {});
  try {
    await c.connect();
    await c.query("select 1");
    return "accepted";
  } catch (e) {
    return (e as Error).message;
  } finally {
    await c.end().catch(() => {});
  }
}

/** Logs in with the current generation of `<module>/db`, as its holder would. */
async function loginGrant(mesh: TestMesh, module: string) {
  const g = await mesh.grant(module, "db");
  const cred = await new CredentialStore(mesh.store.kv.credentials, mesh.masterKey).read(module, "db", g!.generation);
  const adapter = createAdapter(Kinds.PostgresDatabase, { name: "pg-apps", node: "node-a", endpoint: "postgres://127.0.0.1:1" });
  try {
    return await adapter.login({ bindings: cred!.bindings! });
  } finally {
    await adapter.close();
  }
}

/** Every value the grant of pg/admin-password has had in KV (its history), oldest first. */
async function secretGrantHistory(mesh: TestMesh): Promise<Grant[]> {
  const out: Grant[] = [];
  for await (const e of await mesh.store.kv.grants.history({ key: keys.grant("pg", "admin-password") })) {
    if (e.operation === "PUT" && e.length > 0) out.push(Grant.parse(e.json()));
  }
  return out;
}

/** Rotates pg/admin-password through the rotator and waits for the commit. */
async function rotateSecret(w: World): Promise<void> {
  const r = await w.rotator.rotate({ grant: SECRET });
  expect(r).toMatchObject({ from: 1, to: 2 });
  await waitFor("the rotation of pg/admin-password committed", async () => (await rotationOf(w.mesh))?.state === RotationStates.Committed || undefined, 30_000);
}

/**
 * The secret moved to generation 2 while the server is down: rotated then (generation 2 cannot
 * be set there; the rotation goes on), delivered to the binding file, then the server started
 * again with its data directory of generation 1. Returns generation 2's value.
 */
async function rotateWhileDown(w: World & { db: Postgres }): Promise<string> {
  await w.db.stop({ keepData: true });
  await rotateSecret(w);
  const generation2 = await secretValue(w.mesh, 2);
  await waitFor("generation 2 in the binding file", () => readFileSync(secretFile(w.root), "utf8") === generation2 || undefined);
  expect(w.mesh.logs.lines.some((l) => l.includes("generation 2 is set there when it answers again"))).toBe(true);
  await w.db.start();
  return generation2;
}

/** Waits for `<module>/<requirement>`'s condition of `type` to have `reason`, and returns it. */
function waitForReason(mesh: TestMesh, module: string, requirement: string, type: Condition["type"], reason: Condition["reason"]): Promise<Condition> {
  return waitFor(
    `${module}/${requirement} ${type} ${reason}`,
    async () => {
      const c = getCondition((await mesh.grant(module, requirement))?.conditions ?? [], type);
      return c?.reason === reason ? c : undefined;
    },
    30_000,
  );
}

async function rotationOf(mesh: TestMesh): Promise<Rotation | undefined> {
  return (await readJson(mesh.store.kv.rotations, keys.grant("pg", "admin-password"), Rotation))?.value;
}

describe("a server whose data directory outlives the admin password it was initialised with", () => {
  it("secret moved to generation 2 while the server was down: the verifier names 1 and 2, repairs it, a new module becomes Ready, the existing grant works", async () => {
    const w = await startWorld({ repair: "auto", verifyMs: 1_000 });
    const { mesh, db } = w;
    const generation2 = await rotateWhileDown(w); // its data directory still holds generation 1
    const repaired = await waitFor(
      "the repair of pg/admin-password",
      async () => (await mesh.grant("pg", "admin-password"))?.repairs?.find((r) => r.outcome === "repaired"),
      30_000,
    );
    expect(repaired).toMatchObject({ reason: "CredentialDiverged", generation: 2, action: "reapply" });
    expect(repaired.message).toContain(
      `the server at ${db.endpoint} accepts generation 1 of pg/admin-password; the mesh holds 2; its data directory was initialised earlier`,
    );
    expect(repaired.message).toContain("logged in at provider pg-apps with generation 1 and set generation 2 at its server");
    // The diagnosis was the condition first, naming both generations and what the mesh does.
    const diverged = (await secretGrantHistory(mesh)).map((g) => getCondition(g.conditions, "Verified")).find((c) => c?.reason === "CredentialDiverged");
    expect(diverged?.message).toContain("accepts generation 1 of pg/admin-password; the mesh holds 2");
    expect(diverged?.message).toContain("the mesh will log in with generation 1 and set generation 2 at the server");

    expect(await adminLogin(db, generation2)).toBe("accepted");
    expect(await adminLogin(db, await secretValue(mesh, 1))).toMatch(/password authentication failed/);
    expect((await mesh.apply([appModule("shop-new")])).ok).toBe(true);
    await mesh.waitForState("shop-new", "Ready", 30_000);
    expect(await loginGrant(mesh, "shop-new")).toEqual({ ok: true });
    expect(await loginGrant(mesh, "shop")).toEqual({ ok: true });
    await mesh.waitForState("pg", "Ready", 15_000);
    await mesh.waitForState("shop", "Ready", 15_000); // its check from while the server was down is stale
    // Generation 1, which the server held, is still in the credential history.
    expect(await secretValue(mesh, 1)).toBeTruthy();
  }, 120_000);

  it("data directory restored from a copy made at generation 1, after a rotation: the provisioner repairs it and carries on", async () => {
    // The verifier's schedule and the agent's probes (whose failure has the verifier check at once) are far off: the first to need the server is the provisioner.
    const w = await startWorld({ repair: "auto", verifyMs: 300_000, probeMs: 300_000 });
    const { mesh, db } = w;
    const copy = mkdtempSync(join(tmpdir(), "mesh-frozen-copy-"));
    w.dirs.push(copy);
    await db.stop({ keepData: true });
    await run("cp", ["-a", db.dataDir, join(copy, "data")]);
    await db.start();
    // Rotated while it runs: generation 2 is set at the server before the holders are told.
    await rotateSecret(w);
    const generation2 = await secretValue(mesh, 2);
    expect(await adminLogin(db, generation2)).toBe("accepted");
    // The commit's changes to the grant have the verifier check it once: done before the server
    // goes away, so that a check in flight does not meet the restored copy.
    await waitFor(
      "the verifier's check of generation 2",
      async () => {
        const v = getCondition((await mesh.grant("pg", "admin-password"))?.conditions ?? [], "Verified");
        return (v?.status === "True" && v.message.startsWith("generation 2 ")) || undefined;
      },
      15_000,
    );
    // The copy made at generation 1 comes back.
    await db.stop({ keepData: true });
    await run("rm", ["-rf", db.dataDir]);
    await run("cp", ["-a", join(copy, "data"), db.dataDir]);
    await db.start();
    expect(await adminLogin(db, generation2)).toMatch(/password authentication failed/);

    expect((await mesh.apply([appModule("shop-new")])).ok).toBe(true);
    await mesh.waitForState("shop-new", "Ready", 30_000);
    const repair = (await mesh.grant("pg", "admin-password"))?.repairs?.at(-1);
    expect(repair).toMatchObject({ reason: "CredentialDiverged", generation: 2, outcome: "repaired" });
    expect(repair?.by).toMatch(/^provisioner@/);
    expect(repair?.message).toContain(`the server at ${db.endpoint} accepts generation 1 of pg/admin-password; the mesh holds 2`);
    // The diagnosis was the condition first; the verifier checked again once the repair was recorded.
    const diverged = (await secretGrantHistory(mesh)).map((g) => getCondition(g.conditions, "Verified")).find((c) => c?.reason === "CredentialDiverged");
    expect(diverged?.message).toContain("accepts generation 1 of pg/admin-password; the mesh holds 2; its data directory was initialised earlier");
    await waitFor(
      "pg/admin-password verified again",
      async () => getCondition((await mesh.grant("pg", "admin-password"))?.conditions ?? [], "Verified")?.status === "True" || undefined,
      15_000,
    );
    await mesh.waitForState("pg", "Ready", 15_000);
    expect(await adminLogin(db, generation2)).toBe("accepted");
    expect(await loginGrant(mesh, "shop")).toEqual({ ok: true });
    expect(await loginGrant(mesh, "shop-new")).toEqual({ ok: true });
  }, 120_000);

  it("a rotation of a grant the provider serves, while its server holds generation 1: the rotator repairs it and the rotation commits", async () => {
    const w = await startWorld({ repair: "auto", verifyMs: 300_000 });
    const { mesh, db } = w;
    const generation2 = await rotateWhileDown(w);
    const r = await w.rotator.rotate({ grant: "shop/db" });
    expect(r).toMatchObject({ from: 1, to: 2 });
    await waitFor(
      "shop/db rotated",
      async () => (await readJson(mesh.store.kv.rotations, keys.grant("shop", "db"), Rotation))?.value.state === RotationStates.Committed || undefined,
      30_000,
    );
    const repair = (await mesh.grant("pg", "admin-password"))?.repairs?.at(-1);
    expect(repair).toMatchObject({ reason: "CredentialDiverged", generation: 2, outcome: "repaired" });
    expect(repair?.by).toMatch(/^rotator@/);
    expect(await adminLogin(db, generation2)).toBe("accepted");
    expect(await loginGrant(mesh, "shop")).toEqual({ ok: true });
  }, 120_000);

  it("a rotation of the secret waiting for its holder: the server has generation 2, the file still 1, and the provisioner reaches the server with 2", async () => {
    const w = await startWorld({ repair: "auto", verifyMs: 1_000 });
    const { mesh, db } = w;
    await w.agent.stop(); // the holder of pg/admin-password is away: the binding file keeps generation 1
    const r = await w.rotator.rotate({ grant: SECRET });
    const [generation1, generation2] = [await secretValue(mesh, 1), await secretValue(mesh, 2)];
    expect(readFileSync(secretFile(w.root), "utf8")).toBe(generation1);
    expect(await adminLogin(db, generation2)).toBe("accepted");
    // The services' open admin sessions would hide it (a new password leaves them open): end them.
    const c = new pg.Client({ host: db.host, port: db.port, user: "postgres", password: generation2, database: "postgres" });
    await c.connect();
    await c.query("select pg_terminate_backend(pid) from pg_stat_activity where application_name = 'mesh-provisioner' and pid <> pg_backend_pid()");
    await c.end();

    expect((await mesh.apply([appModule("shop-new")])).ok).toBe(true);
    await waitFor(
      "shop-new/db provisioned",
      async () => getCondition((await mesh.grant("shop-new", "db"))?.conditions ?? [], "Provisioned")?.status === "True" || undefined,
      30_000,
    );
    // A check of the secret by the verifier, made after shop-new/db was provisioned.
    await checkedAfter(mesh, "pg", "admin-password", new Date().toISOString(), 30_000);
    // A rotation under way is not a divergence: nothing repaired, nothing reported.
    expect((await mesh.grant("pg", "admin-password"))?.repairs ?? []).toEqual([]);
    expect(getCondition((await mesh.grant("pg", "admin-password"))!.conditions, "Verified")?.reason).not.toBe("CredentialDiverged");
    expect((await rotationOf(mesh))?.state).not.toBe(RotationStates.Committed);

    // The holder comes back: it takes generation 2, confirms, and the rotation commits.
    w.agent = await startAgent({
      store: mesh.store,
      node: "node-a",
      bindingsRoot: join(w.root, "node-a"),
      log: createLogger("agent", { destination: mesh.logs, level: "debug" }),
    });
    await waitFor(
      "the rotation committed",
      async () => ((await rotationOf(mesh))?.id === r.id && (await rotationOf(mesh))?.state === RotationStates.Committed) || undefined,
      30_000,
    );
    await mesh.waitForState("shop-new", "Ready", 30_000);
    expect(readFileSync(secretFile(w.root), "utf8")).toBe(generation2);
  }, 120_000);

  it("a server that accepts no generation the mesh holds: rejected, in words; no repair, and a rotation of the secret is refused before any holder is told", async () => {
    const w = await startWorld({ repair: "auto", verifyMs: 1_000 });
    const { mesh, db } = w;
    // Someone sets the admin password by hand, to one the mesh never had.
    const c = new pg.Client({ host: db.host, port: db.port, user: "postgres", password: await secretValue(mesh, 1), database: "postgres" });
    await c.connect();
    await c.query("ALTER ROLE postgres PASSWORD 'set-by-hand'");
    await c.end();
    // A changed password leaves open sessions open (the services' pooled admin connections too): a restart ends them.
    await db.stop({ keepData: true });
    await db.start();

    const rejected = await waitForReason(mesh, "pg", "admin-password", "Verified", "CredentialRejected");
    expect(rejected.message).toContain(`the server at ${db.endpoint} accepts none of the generations of pg/admin-password the mesh holds (1)`);
    expect(rejected.message).toContain("set the admin user's password at the server to generation 1 of pg/admin-password");
    expect(rejected.message).not.toContain("set-by-hand");

    expect((await mesh.apply([appModule("shop-new")])).ok).toBe(true);
    const failed = await waitForReason(mesh, "shop-new", "db", "Provisioned", "ProvisionFailed");
    expect(failed.message).toContain('rejected the admin user "postgres"');
    expect(failed.message).toContain("accepts none of the generations of pg/admin-password the mesh holds");

    await expect(w.rotator.rotate({ grant: SECRET })).rejects.toThrow(
      /cannot rotate pg\/admin-password, the admin password of provider pg-apps: .*accepts none.*nothing was told to its holders/,
    );
    expect(await rotationOf(mesh)).toBeUndefined();
    expect((await mesh.grant("pg", "admin-password"))?.repairs ?? []).toEqual([]);
    expect(await adminLogin(db, "set-by-hand")).toBe("accepted");
    expect(await loginGrant(mesh, "shop")).toEqual({ ok: true });
  }, 120_000);

  it("with repair: report, nothing changes at the server, the messages name the command, and the command repairs it", async () => {
    const w = await startWorld({ repair: "report", verifyMs: 1_000 });
    const { mesh, db } = w;
    const generation2 = await rotateWhileDown(w);
    const generation1 = await secretValue(mesh, 1);

    const verified = await waitForReason(mesh, "pg", "admin-password", "Verified", "CredentialDiverged");
    expect(verified.message).toContain(`provider pg-apps: the server at ${db.endpoint} accepts generation 1 of pg/admin-password; the mesh holds 2`);
    expect(verified.message).toContain(
      "repair is set to report on pg/admin-password, so nothing was changed at the server: run `meshctl verify pg/admin-password --repair`",
    );

    expect((await mesh.apply([appModule("shop-new")])).ok).toBe(true);
    const waiting = await waitForReason(mesh, "shop-new", "db", "Provisioned", "AwaitingDependency");
    expect(waiting.status).toBe("False");
    expect(waiting.message).toContain("accepts generation 1 of pg/admin-password; the mesh holds 2");
    expect(waiting.message).toContain("`meshctl verify pg/admin-password --repair`");
    expect((await mesh.waitForState("shop-new", "Pending")).message).toContain("db");
    // meshctl explain says it in words.
    const status = (await mesh.moduleStatus("shop-new"))!;
    const explained = explainModule({ status, grants: [(await mesh.grant("shop-new", "db"))!], providers: [pgProvider(db, w.root)], nodes: [] });
    expect(explained.requirements[0]!.why).toContain("waiting for the admin password of provider pg-apps");
    const pgExplained = explainModule({
      status: (await mesh.moduleStatus("pg"))!,
      grants: [(await mesh.grant("pg", "admin-password"))!],
      providers: [],
      nodes: [],
    });
    expect(pgExplained.requirements[0]!.next).toContain("meshctl verify pg/admin-password --repair");

    // Nothing was changed at the server, and nothing was repaired.
    expect(await adminLogin(db, generation1)).toBe("accepted");
    expect(await adminLogin(db, generation2)).toMatch(/password authentication failed/);
    expect((await mesh.grant("pg", "admin-password"))?.repairs ?? []).toEqual([]);
    expect(await loginGrant(mesh, "shop")).toEqual({ ok: true });

    // The command named: meshctl verify pg/admin-password --repair.
    const out = await mesh.verifier!.verify(keys.grant("pg", "admin-password"), { repair: true });
    expect(out.repair).toMatchObject({ outcome: "repaired", requested: true, reason: "CredentialDiverged" });
    expect(await adminLogin(db, generation2)).toBe("accepted");
    await mesh.waitForState("shop-new", "Ready", 45_000);
    expect(await loginGrant(mesh, "shop-new")).toEqual({ ok: true });
  }, 150_000);

  it("meshctl rotate pg/admin-password while the server runs: the server accepts generation 2 before the commit; no grant it serves fails", async () => {
    // The server part confirms only once the test lets it, so the window before the commit can be looked at.
    const markers = mkdtempSync(join(tmpdir(), "mesh-frozen-markers-"));
    chmodSync(markers, 0o755);
    const script = join(markers, "hold.sh");
    writeFileSync(script, `#!/bin/sh\nfor i in $(seq 1 600); do [ -f "${markers}/go" ] && exit 0; sleep 0.05; done; exit 1\n`, { mode: 0o755 });
    const w = await startWorld({ repair: "auto", verifyMs: 500, onRotate: "hold", hooks: [`hold=${script}`] });
    w.dirs.push(markers);
    const { mesh, db } = w;
    const generation1 = await secretValue(mesh, 1);

    // A holder of shop/db keeps querying through it all.
    const b = await new CredentialStore(mesh.store.kv.credentials, mesh.masterKey).read("shop", "db", 1);
    const client = new pg.Client({
      host: db.host,
      port: db.port,
      user: b!.bindings!.username,
      password: b!.bindings!.password,
      database: b!.bindings!.database,
    });
    const errors: string[] = [];
    client.on("error", (e) => errors.push(e.message));
    await client.connect();
    let stop = false;
    let queries = 0;
    const states = new Set<string>();
    const loop = (async () => {
      while (!stop) {
        await client.query("select 1").then(
          () => queries++,
          (e: Error) => errors.push(e.message),
        );
        const s = await mesh.moduleStatus("shop");
        if (s) states.add(s.state);
        await new Promise((r) => setTimeout(r, 50));
      }
    })();

    const r = await w.rotator.rotate({ grant: SECRET });
    expect(r).toMatchObject({ from: 1, to: 2 });
    const generation2 = await secretValue(mesh, 2);
    // Staged: the server has generation 2 already, while the rotation has not committed.
    expect(await adminLogin(db, generation2)).toBe("accepted");
    expect(await adminLogin(db, generation1)).toMatch(/password authentication failed/);
    const held = await rotationOf(mesh);
    expect(held?.state).not.toBe(RotationStates.Committed);
    // A new module is served in the window, and the existing grants keep logging in.
    expect((await mesh.apply([appModule("shop-new")])).ok).toBe(true);
    await mesh.waitForState("shop-new", "Ready", 30_000);
    expect((await rotationOf(mesh))?.state).not.toBe(RotationStates.Committed);
    expect(await loginGrant(mesh, "shop")).toEqual({ ok: true });

    writeFileSync(join(markers, "go"), "");
    const committed = await waitFor("the rotation committed", async () => {
      const r = await rotationOf(mesh);
      return r?.state === RotationStates.Committed ? r : undefined;
    });
    // The verifier checks the admin password's grant again after the commit (its generation
    // changed); that check must find nothing to repair.
    await waitFor(`the verifier's check of ${SECRET} after the commit`, async () => {
      const v = await readJson(mesh.store.kv.verifications, keys.grant("pg", "admin-password"), Verification);
      return v !== undefined && Date.parse(v.value.checkedAt) >= Date.parse(committed.committedAt!);
    });
    // And the application's queries went on through the window and past the commit.
    const before = queries;
    await waitFor("queries after the commit", () => queries > before);
    stop = true;
    await loop;
    await client.end();
    expect(errors).toEqual([]);
    expect(before).toBeGreaterThan(0);
    expect([...states]).toEqual(["Ready"]);
    expect(getCondition((await mesh.grant("shop", "db"))!.conditions, "Verified")).toMatchObject({ status: "True" });
    expect(await adminLogin(db, generation2)).toBe("accepted");
    // No repair was needed: the mesh's own rotation never left the server behind.
    expect((await mesh.grant("pg", "admin-password"))?.repairs ?? []).toEqual([]);
    await mesh.waitForState("pg", "Ready", 10_000);
  }, 120_000);
});
