/**
 * The mariadb.database adapter against the machine's MariaDB (127.0.0.1:3306, root without a
 * password over TCP; MARIADB_TEST_HOST / MARIADB_TEST_PORT to point elsewhere). The adapter
 * administers it as a user of the suite's own, with a password and only the privileges the
 * docs/reference/providers.md names, so those are proven enough; root is the suite's view of the server.
 */
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import mysql from "mysql2/promise";
import { ErrorCodes, isMeshError } from "@mesh/shared";
import type { BindingValues, GrantRef, ProviderAdapter, ProviderConfig } from "@mesh/providers";
import { createMariadbAdapter, nativePasswordHash } from "../../packages/providers/src/mariadb.js";
import { freePort } from "../harness/ports.js";
import { startOwnMariadb, type OwnMariadb } from "../harness/mariadb.js";
import { INJECTION_NAME, describeAdminVerbs, describeProviderConformance, expectMeshError, freshGrant } from "./provider-conformance.js";

const HOST = process.env.MARIADB_TEST_HOST ?? "127.0.0.1";
const PORT = Number(process.env.MARIADB_TEST_PORT ?? 3306);
const ADMIN = `mesh_test_admin_${randomBytes(4).toString("hex")}`;
const ADMIN_PASSWORD = `adm-${randomBytes(12).toString("hex")}`;
/** What docs/reference/providers.md asks of an admin that is not root. */
const ADMIN_GRANTS =
  "CREATE USER, PROCESS, CONNECTION ADMIN, SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, REFERENCES, INDEX, ALTER, " +
  "CREATE TEMPORARY TABLES, LOCK TABLES, EXECUTE, CREATE VIEW, SHOW VIEW, CREATE ROUTINE, ALTER ROUTINE, EVENT, TRIGGER, DELETE HISTORY";

let root: mysql.Pool;
let deadPort: number;
let metaExisted = true;

const q = async <R = mysql.RowDataPacket>(sql: string, values?: unknown[]): Promise<R[]> => (await root.query(sql, values))[0] as R[];

beforeAll(async () => {
  root = mysql.createPool({ host: HOST, port: PORT, user: "root", connectionLimit: 2 });
  metaExisted = (await q("SELECT 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = 'mesh_meta'")).length > 0;
  await root.query(`CREATE USER \`${ADMIN}\`@'%' IDENTIFIED BY ?`, [ADMIN_PASSWORD]);
  await root.query(`GRANT ${ADMIN_GRANTS} ON *.* TO \`${ADMIN}\`@'%' WITH GRANT OPTION`);
  deadPort = await freePort();
});
afterAll(async () => {
  await root.query(`DROP USER IF EXISTS \`${ADMIN}\`@'%'`);
  // The marks' database goes only if this suite made it and left no mark in it.
  if (!metaExisted && (await q("SELECT 1 FROM mesh_meta.objects LIMIT 1").catch(() => [])).length === 0) {
    await root.query("DROP DATABASE IF EXISTS mesh_meta");
  }
  await root.end();
});

const providerOf = (over: Partial<ProviderConfig> = {}): ProviderConfig => ({
  name: "maria-test",
  node: "node-a",
  endpoint: `mysql://${HOST}:${PORT}`,
  admin: { username: ADMIN, password: ADMIN_PASSWORD },
  ...over,
});

describeProviderConformance("mariadb.database", () => createMariadbAdapter(providerOf()), {
  stateful: true,
  wrongCredential: (b) => ({ ...b, password: `${b.password}x` }),
  unreachable: {
    makeAdapter: () => createMariadbAdapter(providerOf({ endpoint: `mysql://127.0.0.1:${deadPort}` })),
    bindings: (b) => ({ ...b, port: String(deadPort) }),
  },
});

/** The base name of a fresh grant (`conf-…/res` → `conf__…_res`). */
const baseOf = (g: GrantRef) => `${g.module.replaceAll("-", "__")}_${g.requirement}`;

/** A holder's own connection, by the uri alone, as a module would open it. */
const holder = (b: BindingValues) => mysql.createConnection(b.uri!);

/** Runs `sql` as the holder of `bindings`. */
async function asHolder<R = mysql.RowDataPacket>(bindings: BindingValues, sql: string): Promise<R[]> {
  const c = await holder(bindings);
  try {
    return (await c.query(sql))[0] as R[];
  } finally {
    await c.end();
  }
}

const usersNamed = (prefix: string) => q("SELECT User AS user, Host AS host FROM mysql.global_priv WHERE User LIKE ?", [`${prefix}%`]);
const databasesNamed = (prefix: string) => q("SELECT SCHEMA_NAME AS name FROM information_schema.SCHEMATA WHERE SCHEMA_NAME LIKE ?", [`${prefix}%`]);
const marksOf = (g: GrantRef) =>
  q("SELECT type, name FROM mesh_meta.objects WHERE grant_ref = ? ORDER BY type, name", [`${g.module}/${g.requirement}`]).catch(() => []);

describe("mariadb.database adapter", () => {
  let adapter: ProviderAdapter;
  beforeAll(() => {
    adapter = createMariadbAdapter(providerOf());
  });
  afterAll(async () => {
    await adapter?.close();
  });

  it("binds what a holder needs (type mysql), and the uri alone connects", async () => {
    const grant = freshGrant();
    const secret = adapter.generate();
    const { resource, bindings } = await adapter.create({ grant, secret });
    const base = baseOf(grant);
    expect(resource).toEqual({ database: base, user: `${base}_a` });
    expect(bindings).toEqual({
      type: "mysql",
      provider: "maria-test",
      host: HOST,
      port: String(PORT),
      database: base,
      username: `${base}_a`,
      password: secret.password,
      uri: `mysql://${base}_a:${encodeURIComponent(secret.password!)}@${HOST}:${PORT}/${base}`,
    });
    expect(await asHolder(bindings, "SELECT CURRENT_USER() AS who, DATABASE() AS db")).toEqual([{ who: `${base}_a@%`, db: base }]);
    expect(await marksOf(grant)).toEqual([
      { type: "database", name: base },
      { type: "user", name: `${base}_a` },
    ]);
    await adapter.delete({ grant });
    expect(await marksOf(grant)).toEqual([]);
    expect(await usersNamed(base)).toEqual([]);
    expect(await databasesNamed(base)).toEqual([]);
  });

  it("stores the mysql_native_password hash, never the plaintext, computed as MariaDB computes it", async () => {
    expect((await q<{ h: string }>("SELECT PASSWORD('p4ss-word') AS h"))[0]!.h).toBe(nativePasswordHash("p4ss-word"));
    const grant = freshGrant();
    const secret = adapter.generate();
    const { bindings } = await adapter.create({ grant, secret });
    const [row] = await q<{ auth: string; plugin: string }>(
      "SELECT JSON_VALUE(Priv, '$.authentication_string') AS auth, JSON_VALUE(Priv, '$.plugin') AS plugin FROM mysql.global_priv WHERE User = ?",
      [bindings.username],
    );
    expect(row).toEqual({ auth: nativePasswordHash(secret.password!), plugin: "mysql_native_password" });
    await adapter.delete({ grant });
  });

  it("generation 1 creates a table that generation 2 reads and writes, and the other way round", async () => {
    const grant = freshGrant(1);
    const g1 = await adapter.create({ grant, secret: adapter.generate() });
    await asHolder(g1.bindings, "CREATE TABLE orders (id INT PRIMARY KEY, item TEXT)");
    await asHolder(g1.bindings, "INSERT INTO orders VALUES (1, 'tea')");

    const g2 = await adapter.create({ grant: { ...grant, generation: 2 }, secret: adapter.generate() });
    expect(g2.bindings.username).toBe(`${baseOf(grant)}_b`);
    expect(g2.bindings.database).toBe(g1.bindings.database);
    expect(await asHolder(g2.bindings, "SELECT item FROM orders")).toEqual([{ item: "tea" }]);
    await asHolder(g2.bindings, "INSERT INTO orders VALUES (2, 'coffee')");
    await asHolder(g2.bindings, "CREATE TABLE invoices (id INT)");
    expect(await asHolder(g1.bindings, "SELECT COUNT(*) AS n FROM orders")).toEqual([{ n: 2 }]);
    await asHolder(g1.bindings, "INSERT INTO invoices VALUES (1)");
    await asHolder(g1.bindings, "ALTER TABLE invoices ADD COLUMN note TEXT");
    expect(await asHolder(g2.bindings, "SELECT id, note FROM invoices")).toEqual([{ id: 1, note: null }]);
    await adapter.delete({ grant });
  });

  it("retire locks the user and ends its open session; the other generation's session lives on", async () => {
    const grant = freshGrant(1);
    const g1 = await adapter.create({ grant, secret: adapter.generate() });
    const g2 = await adapter.create({ grant: { ...grant, generation: 2 }, secret: adapter.generate() });
    const old = await holder(g1.bindings);
    old.on("error", () => {}); // the kill arrives as a socket error
    const current = await holder(g2.bindings);
    try {
      await old.query("SELECT 1");
      await adapter.retire({ grant });
      await expect(old.query("SELECT 1")).rejects.toThrow();
      expect(await current.query("SELECT 1 AS one").then(([rows]) => rows)).toEqual([{ one: 1 }]);
      expect(await adapter.login({ bindings: g1.bindings })).toMatchObject({ ok: false, reason: "rejected", message: expect.stringMatching(/locked/) });
      expect((await adapter.observe({ grant })).details).toMatchObject({ user: `${baseOf(grant)}_a`, userLogin: "locked" });
    } finally {
      old.destroy();
      await current.end();
    }
    await adapter.delete({ grant });
  });

  it("delete ends the sessions of the grant's users", async () => {
    const grant = freshGrant();
    const { bindings } = await adapter.create({ grant, secret: adapter.generate() });
    const c = await holder(bindings);
    c.on("error", () => {});
    try {
      await adapter.delete({ grant });
      await expect(c.query("SELECT 1")).rejects.toThrow();
    } finally {
      c.destroy();
    }
    expect(await databasesNamed(baseOf(grant))).toEqual([]);
  });

  it("another grant's credential cannot connect to this grant's database", async () => {
    const [a, b] = [freshGrant(), freshGrant()];
    const mine = await adapter.create({ grant: a, secret: adapter.generate() });
    const theirs = await adapter.create({ grant: b, secret: adapter.generate() });
    const crossed = { ...theirs.bindings, database: mine.bindings.database! };
    expect(await adapter.login({ bindings: crossed })).toMatchObject({ ok: false, reason: "rejected" });
    await adapter.delete({ grant: a });
    await adapter.delete({ grant: b });
  });

  it("a grant's users reach its own database only: `_` in its name is no wildcard", async () => {
    // a/b-c owns database a_b_c; ax/b_c… is not a mesh name, so the other grant is axb/c: axb_c,
    // which the pattern a_b_c would match were `_` a wildcard.
    const tag = randomBytes(3).toString("hex");
    const a = { module: `a${tag}`, requirement: "b-c", generation: 1 };
    const b = { module: `a${tag}xb`, requirement: "c", generation: 1 };
    const mine = await adapter.create({ grant: a, secret: adapter.generate() });
    const theirs = await adapter.create({ grant: b, secret: adapter.generate() });
    try {
      expect([mine.bindings.database, theirs.bindings.database]).toEqual([`a${tag}_b_c`, `a${tag}xb_c`]);
      expect(await adapter.login({ bindings: { ...mine.bindings, database: theirs.bindings.database! } })).toMatchObject({ ok: false, reason: "rejected" });
      // Nor by USE from its own session.
      const c = await holder(mine.bindings);
      try {
        await expect(c.query(`USE \`${theirs.bindings.database}\``)).rejects.toThrow(/denied/i);
      } finally {
        c.destroy();
      }
    } finally {
      await adapter.delete({ grant: a });
      await adapter.delete({ grant: b });
    }
  });

  it("login says missing once the database is gone, and create makes it again", async () => {
    const grant = freshGrant();
    const { bindings } = await adapter.create({ grant, secret: adapter.generate() });
    await root.query(`DROP DATABASE \`${bindings.database}\``);
    expect(await adapter.login({ bindings })).toMatchObject({ ok: false, reason: "missing" });
    expect((await adapter.observe({ grant })).exists).toBe(false);
    const again = await adapter.create({ grant, secret: adapter.generate() });
    expect(await adapter.login({ bindings: again.bindings })).toEqual({ ok: true });
    await adapter.delete({ grant });
  });

  it("refuses hostile and reserved names before any SQL: nothing is created", async () => {
    const before = await q("SELECT COUNT(*) AS n FROM mysql.global_priv");
    const dbsBefore = await q("SELECT COUNT(*) AS n FROM information_schema.SCHEMATA");
    for (const grant of [
      { module: INJECTION_NAME, requirement: "db", generation: 1 },
      { module: "shop", requirement: INJECTION_NAME, generation: 1 },
      { module: "shop", requirement: "db`; DROP DATABASE mysql; --", generation: 1 },
      { module: "shop", requirement: "a'@'%", generation: 1 },
    ]) {
      const e = await expectMeshError(adapter.create({ grant, secret: adapter.generate() }), ErrorCodes.InvalidName);
      expect(e.message).toMatch(/refused/);
      await expectMeshError(adapter.retire({ grant }), ErrorCodes.InvalidName);
    }
    for (const [module, requirement] of [
      ["information", "schema"],
      ["performance", "schema"],
      ["mesh", "meta"],
    ] as const) {
      const e = await expectMeshError(adapter.create({ grant: { module, requirement, generation: 1 }, secret: adapter.generate() }), ErrorCodes.InvalidName);
      expect(e.message).toMatch(/reserves.*rename/);
    }
    expect(await q("SELECT COUNT(*) AS n FROM mysql.global_priv")).toEqual(before);
    expect(await q("SELECT COUNT(*) AS n FROM information_schema.SCHEMATA")).toEqual(dbsBefore);
  });

  it("never takes over a user the mesh did not make: Conflict, nothing made, the user left alone", async () => {
    const grant = freshGrant();
    const base = baseOf(grant);
    await root.query(`CREATE USER \`${base}_a\`@'%' IDENTIFIED BY 'theirs'`);
    try {
      const e = await expectMeshError(adapter.create({ grant, secret: adapter.generate() }), ErrorCodes.Conflict);
      expect(e.message).toContain(`${base}_a`);
      expect(e.message).toMatch(/drop or rename/);
      expect(await databasesNamed(base)).toEqual([]);
      expect(await marksOf(grant)).toEqual([]);
      const seen = await adapter.observe({ grant });
      expect(seen.exists).toBe(false);
      expect(seen.details.conflict).toContain(`${base}_a`);
      await adapter.retire({ grant }); // not the mesh's: not locked
      await adapter.delete({ grant }); // not the mesh's: not dropped
      await (await mysql.createConnection({ host: HOST, port: PORT, user: `${base}_a`, password: "theirs" })).end(); // still theirs
      // Generation 2 is another user, and is the mesh's to make; the database with it.
      const g2 = await adapter.create({ grant: { ...grant, generation: 2 }, secret: adapter.generate() });
      expect(await adapter.login({ bindings: g2.bindings })).toEqual({ ok: true });
      await adapter.delete({ grant });
      expect(await usersNamed(base)).toEqual([{ user: `${base}_a`, host: "%" }]);
    } finally {
      await root.query(`DROP USER IF EXISTS \`${base}_a\`@'%'`);
    }
  });

  it("a user of the grant's name at another host is a Conflict too (it would take that host's logins)", async () => {
    const grant = freshGrant();
    const base = baseOf(grant);
    await root.query(`CREATE USER \`${base}_a\`@'localhost'`);
    try {
      await expectMeshError(adapter.create({ grant, secret: adapter.generate() }), ErrorCodes.Conflict);
      expect(await usersNamed(base)).toEqual([{ user: `${base}_a`, host: "localhost" }]);
    } finally {
      await root.query(`DROP USER IF EXISTS \`${base}_a\`@'localhost'`);
    }
  });

  it("never takes over a database the mesh did not make: Conflict, nothing made, the database left alone", async () => {
    const grant = freshGrant();
    const base = baseOf(grant);
    await root.query(`CREATE DATABASE \`${base}\``);
    try {
      const e = await expectMeshError(adapter.create({ grant, secret: adapter.generate() }), ErrorCodes.Conflict);
      expect(e.message).toContain(`database ${base}`);
      expect(await usersNamed(base)).toEqual([]);
      expect((await adapter.observe({ grant })).details.conflict).toContain(base);
      await adapter.delete({ grant });
      expect(await databasesNamed(base)).toEqual([{ name: base }]);
    } finally {
      await root.query(`DROP DATABASE IF EXISTS \`${base}\``);
    }
  });

  it("a wrong admin password is ProviderMisconfigured, naming the user and where the password comes from", async () => {
    const wrong = createMariadbAdapter(providerOf({ admin: { username: ADMIN, password: "not-the-password" } }));
    try {
      const e = await expectMeshError(wrong.observe({ grant: freshGrant() }), ErrorCodes.ProviderMisconfigured);
      expect(e.message).toContain(`"${ADMIN}"`);
      expect(e.message).toMatch(/passwordEnv|passwordFile/);
      expect(e.message).not.toContain("not-the-password");
      expect(isMeshError(e) && e.retryable).toBe(false);
    } finally {
      await wrong.close();
    }
  });

  it("an admin without the privileges is ProviderMisconfigured, saying which it needs", async () => {
    const weak = `mesh_test_weak_${randomBytes(4).toString("hex")}`;
    await root.query(`CREATE USER \`${weak}\`@'%' IDENTIFIED BY 'weak-pass'`);
    const limited = createMariadbAdapter(providerOf({ admin: { username: weak, password: "weak-pass" } }));
    try {
      const grant = freshGrant();
      const e = await expectMeshError(limited.create({ grant, secret: limited.generate() }), ErrorCodes.ProviderMisconfigured);
      expect(e.message).toMatch(/lacks a privilege.*CREATE USER/);
      expect(await usersNamed(baseOf(grant))).toEqual([]);
    } finally {
      await limited.close();
      await root.query(`DROP USER IF EXISTS \`${weak}\`@'%'`);
    }
  });

  it("survives the server ending its idle admin sessions: the next call reconnects", async () => {
    const grant = freshGrant();
    await adapter.create({ grant, secret: adapter.generate() });
    const sessions = await q<{ id: number }>("SELECT ID AS id FROM information_schema.PROCESSLIST WHERE USER = ?", [ADMIN]);
    expect(sessions.length).toBeGreaterThan(0);
    for (const { id } of sessions) await root.query("KILL CONNECTION ?", [id]);
    // At once: the pool may or may not have heard of the closed sockets yet, and either way the call goes through.
    expect((await adapter.observe({ grant })).exists).toBe(true);
    await adapter.delete({ grant });
  });

  it("works as root without a password, with a mariadb:// endpoint", async () => {
    const asRoot = createMariadbAdapter(providerOf({ endpoint: `mariadb://${HOST}:${PORT}`, admin: { username: "root" } }));
    try {
      const grant = freshGrant();
      const { bindings } = await asRoot.create({ grant, secret: asRoot.generate() });
      expect(await asRoot.login({ bindings })).toEqual({ ok: true });
      await asRoot.delete({ grant });
      expect((await asRoot.observe({ grant })).exists).toBe(false);
    } finally {
      await asRoot.close();
    }
  });
});

describe("mariadb.database on a MariaDB of the test's own", () => {
  let server: OwnMariadb;
  beforeAll(async () => {
    server = await startOwnMariadb({ adminPassword: `root-${randomBytes(12).toString("hex")}` });
  }, 60_000);
  afterAll(async () => {
    await server?.stop();
  });

  describeAdminVerbs("mariadb.database", () => ({
    admin: async (user, password) => {
      const c = await server.connect(server.adminPassword);
      await c.query(`CREATE USER \`${user}\`@'%' IDENTIFIED BY ?`, [password]);
      await c.query(`GRANT ALL ON *.* TO \`${user}\`@'%' WITH GRANT OPTION`);
      await c.end();
      return {
        adapter: createMariadbAdapter(providerOf({ endpoint: server.endpoint, admin: { username: user, password: "unused" } })),
        remove: async () => {
          const r = await server.connect(server.adminPassword);
          await r.query(`DROP USER IF EXISTS \`${user}\`@'%'`);
          await r.end();
        },
      };
    },
    restart: async () => {
      await server.stop({ keepData: true });
      await server.start();
    },
    unreachable: (user) => createMariadbAdapter(providerOf({ endpoint: `mysql://127.0.0.1:${deadPort}`, admin: { username: user, password: "unused" } })),
  }));
});
