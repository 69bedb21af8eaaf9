/**
 * The first whole loop, end to end on a real nats-server and a real PostgreSQL with
 * scram-sha-256 (so a wrong password really fails): declare → resolve → provision → deliver.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readFileSync, existsSync } from "node:fs";
import { join } from "node:path";
import pg from "pg";
import { Buckets, getCondition, type ModuleDoc } from "@mesh/shared";
import { startPostgres, type Postgres } from "./harness/postgres.js";
import { adminEnv, harnessProvider, shopModule } from "./fixtures.js";
import { startTestMesh, type TestMesh } from "./mesh.js";
import { waitFor } from "./harness/wait.js";

const shop: ModuleDoc = shopModule();

const read = (root: string, ...p: string[]) => readFileSync(join(root, ...p), "utf8");

describe("declare → resolve → provision → deliver", () => {
  let db: Postgres;
  let mesh: TestMesh;

  beforeAll(async () => {
    db = await startPostgres();
    mesh = await startTestMesh({ env: adminEnv(db) });
  });
  afterAll(async () => {
    await mesh?.stop();
    await db?.stop();
  });

  // The provider and the example modules, applied by whichever test needs them first; the reply is that first apply's.
  let applied: ReturnType<TestMesh["apply"]> | undefined;
  const examples = () =>
    (applied ??= mesh.apply([harnessProvider(db), shop, { kind: "Module", name: "static-site", parts: [{ name: "web", node: "node-a" }] }]));

  it("turns the example module into a real role, database and secret, delivered as files", async () => {
    const reply = await examples();
    expect(reply).toEqual({
      ok: true,
      accepted: [
        { kind: "Provider", name: "pg-main", action: "created" },
        { kind: "Module", name: "shop", action: "created" },
        { kind: "Module", name: "static-site", action: "created" },
      ],
    });
    const status = await mesh.waitForState("shop", "Ready");
    expect(status.requirements).toBe(2);

    const dbGrant = (await mesh.grant("shop", "db"))!;
    expect(dbGrant).toMatchObject({ id: "shop/db", provider: "pg-main", generation: 1, targets: [{ part: "api", node: "node-a" }] });
    for (const t of ["Resolved", "Provisioned", "Delivered"] as const) expect(getCondition(dbGrant.conditions, t)?.status).toBe("True");

    const root = join(mesh.bindingsRoot, "node-a", "shop", "api");
    const b = (k: string) => read(root, "db", k);
    expect(b("type")).toBe("postgresql");
    expect(b("provider")).toBe("pg-main");
    expect(b("database")).toBe(dbGrant.resource.database);
    expect(Number(b("port"))).toBe(db.port);

    // The delivered values log in and can create a table in that database.
    const client = new pg.Client({ host: b("host"), port: Number(b("port")), user: b("username"), password: b("password"), database: b("database") });
    await client.connect();
    await client.query("create table orders (id int primary key, item text)");
    await client.query("insert into orders values (1, 'tea')");
    expect((await client.query("select item from orders")).rows).toEqual([{ item: "tea" }]);
    await client.end();
    // …and a wrong password does not (scram-sha-256).
    const wrong = new pg.Client({ host: b("host"), port: Number(b("port")), user: b("username"), password: "wrong", database: b("database") });
    await expect(wrong.connect()).rejects.toThrow(/password authentication failed/);

    expect(read(root, "session-key", "type")).toBe("secret");
    expect(read(root, "session-key", "value").length).toBeGreaterThanOrEqual(32);
    const env = read(root, "..", "api.env");
    expect(env).toContain("DB_USERNAME=");
    expect(env).toContain("SESSION_KEY_VALUE=");

    // The worker is not installed: nothing for it, anywhere.
    const key = (await mesh.grant("shop", "session-key"))!;
    expect(key.targets).toEqual([{ part: "api", node: "node-a" }]);
    expect(existsSync(join(mesh.bindingsRoot, "node-b"))).toBe(false);
  });

  it("tells NothingRequired apart from never processed", async () => {
    await examples();
    const s = await mesh.waitForState("static-site", "NothingRequired");
    expect(s.requirements).toBe(0);
    expect(await mesh.moduleStatus("never-applied")).toBeUndefined();
  });

  it("does not provision a requirement none of whose parts is installed", async () => {
    await examples();
    await mesh.apply([
      {
        kind: "Module",
        name: "batch",
        parts: [{ name: "runner", node: "node-b", installed: false }],
        requires: [{ name: "jobs", kind: "postgres.database" }],
      },
    ]);
    const g = await waitFor("batch/jobs to say NoInstalledPart", async () => {
      const g = await mesh.grant("batch", "jobs");
      return getCondition(g?.conditions ?? [], "Provisioned")?.reason === "NoInstalledPart" ? g : undefined;
    });
    expect(g.generation).toBe(0);
    const roles = await db.query("select rolname from pg_roles where rolname like 'batch%'");
    const dbs = await db.query("select datname from pg_database where datname like 'batch%'");
    expect(roles.rows).toEqual([]);
    expect(dbs.rows).toEqual([]);
    // Installing the part provisions it, with no other command.
    await mesh.apply([{ kind: "Module", name: "batch", parts: [{ name: "runner", node: "node-a" }], requires: [{ name: "jobs", kind: "postgres.database" }] }]);
    // The module was Ready already (nothing installed needed anything): wait for the grant itself.
    const provisioned = await waitFor("batch/jobs to be provisioned and delivered", async () => {
      const g = await mesh.grant("batch", "jobs");
      return g && g.generation === 1 && getCondition(g.conditions, "Delivered")?.status === "True" ? g : undefined;
    });
    await mesh.waitForState("batch", "Ready");
    const name = provisioned.resource.database;
    expect(name).toMatch(/^batch/);
    expect((await db.query("select datname from pg_database where datname = $1", [name])).rows).toHaveLength(1);
  });

  it("rejects a bad manifest with its problems listed, and stores nothing of it", async () => {
    const reply = await mesh.apply([
      { kind: "Module", name: "good-one", parts: [{ name: "api", node: "node-a" }] },
      { kind: "Module", name: "bad", parts: [{ name: "api", node: "node-a" }], requires: [{ name: "db", parts: ["api"] }] },
      { kind: "Module", name: "evil", parts: [{ name: "api", node: "node-a" }], requires: [{ name: 'x"; DROP ROLE postgres; --', kind: "postgres.database" }] },
    ]);
    expect(reply.ok).toBe(false);
    if (reply.ok) return;
    expect(reply.problems).toEqual(
      expect.arrayContaining([
        { document: 1, path: "requires[0].kind", message: "required" },
        expect.objectContaining({ document: 2, path: "requires[0].name" }),
      ]),
    );
    for (const name of ["good-one", "bad", "evil"]) expect(await mesh.store.kv.manifests.get(name)).toBeNull();
    expect((await db.query("select 1 from pg_roles where rolname = 'postgres'")).rows).toHaveLength(1);
  });

  it("keeps every secret out of the logs and out of the store in the clear", async () => {
    await examples();
    await mesh.waitForState("shop", "Ready");
    const root = join(mesh.bindingsRoot, "node-a", "shop", "api");
    await waitFor("shop/api's files", () => existsSync(join(root, "db", "password")) && existsSync(join(root, "session-key", "value")));
    const secrets = [read(root, "db", "password"), read(root, "session-key", "value"), read(root, "db", "uri"), db.adminPassword];
    expect(mesh.logs.lines.length).toBeGreaterThan(10);
    for (const s of secrets) expect(mesh.logs.text).not.toContain(s);

    // Every value ever written to any bucket, history included, and every delivery message.
    const jsm = mesh.store.jsm;
    for (const stream of [...Object.values(Buckets).map((b) => `KV_${b}`), "MESH_DELIVERIES"]) {
      const info = await jsm.streams.info(stream);
      for (let seq = info.state.first_seq; seq <= info.state.last_seq; seq++) {
        const m = await jsm.streams.getMessage(stream, { seq }).catch(() => null);
        if (!m) continue;
        const text = new TextDecoder().decode(m.data);
        for (const s of secrets) expect(text, `${stream} seq ${seq}`).not.toContain(s);
        if (stream === "KV_mesh-credentials") expect(text).toContain("aes-256-gcm");
      }
    }
  });
});

describe("a requirement waiting for its provider", () => {
  let db: Postgres;
  let mesh: TestMesh;
  beforeAll(async () => {
    db = await startPostgres();
    mesh = await startTestMesh({ env: adminEnv(db) });
  });
  afterAll(async () => {
    await mesh?.stop();
    await db?.stop();
  });

  const app: ModuleDoc = {
    kind: "Module",
    name: "app",
    parts: [{ name: "api", node: "node-a", installed: true }],
    requires: [{ name: "db", kind: "postgres.database" }],
  };
  const reasonOf = async (m: string, r: string) => getCondition((await mesh.grant(m, r))?.conditions ?? [], "Resolved")?.reason;

  it("shows NoProvider, and becomes Ready when a provider is registered, with no other command", async () => {
    await mesh.apply([app]);
    await mesh.waitForState("app", "Unsatisfiable");
    expect(await reasonOf("app", "db")).toBe("NoProvider");
    await mesh.apply([harnessProvider(db)]);
    await mesh.waitForState("app", "Ready");
  });

  it("shows ProviderNotInstalled naming the provider, and becomes Ready once it is installed", async () => {
    const other: ModuleDoc = { ...app, name: "other", requires: [{ name: "store", kind: "postgres.database" }] };
    // Only an uninstalled provider can serve this module's kind now.
    await mesh.apply([{ ...harnessProvider(db), installed: false }, other]);
    await mesh.waitForState("other", "Unsatisfiable");
    const g = (await mesh.grant("other", "store"))!;
    expect(getCondition(g.conditions, "Resolved")).toMatchObject({ reason: "ProviderNotInstalled" });
    expect(getCondition(g.conditions, "Resolved")!.message).toContain("pg-main");
    await mesh.apply([harnessProvider(db)]);
    await mesh.waitForState("other", "Ready");
  });
});
