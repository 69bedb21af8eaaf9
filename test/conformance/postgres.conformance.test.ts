/**
 * The postgres.database adapter against a PostgreSQL of its own with scram-sha-256, where a
 * wrong password really fails.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import pg from "pg";
import { ErrorCodes, Kinds, isMeshError } from "@mesh/shared";
import { createAdapter, type BindingValues, type ProviderAdapter, type ProviderConfig } from "@mesh/providers";
import { scramSha256Verifier } from "../../packages/providers/src/scram.js";
import { startPostgres, type Postgres } from "../harness/postgres.js";
import { freePort } from "../harness/ports.js";
import { INJECTION_NAME, describeAdminVerbs, describeProviderConformance, expectMeshError, freshGrant } from "./provider-conformance.js";

let server: Postgres;
let deadPort: number;

beforeAll(async () => {
  server = await startPostgres();
  deadPort = await freePort();
});
afterAll(async () => {
  await server?.stop();
});

const providerOf = (s: Postgres, over: Partial<ProviderConfig> = {}): ProviderConfig => ({
  name: "pg-test",
  node: "node-a",
  endpoint: s.endpoint,
  admin: { username: s.adminUser, password: s.adminPassword },
  ...over,
});

describeProviderConformance("postgres.database", () => createAdapter(Kinds.PostgresDatabase, providerOf(server)), {
  stateful: true,
  wrongCredential: (b) => ({ ...b, password: `${b.password}x` }),
  unreachable: {
    makeAdapter: () => createAdapter(Kinds.PostgresDatabase, providerOf(server, { endpoint: `postgres://127.0.0.1:${deadPort}` })),
    bindings: (b) => ({ ...b, port: String(deadPort) }),
  },
});

/** Runs `sql` as the holder of `bindings`, as a module would. */
async function asHolder<R extends Record<string, unknown>>(bindings: BindingValues, sql: string): Promise<R[]> {
  const c = new pg.Client({ connectionString: bindings.uri, connectionTimeoutMillis: 3_000 });
  await c.connect();
  try {
    return (await c.query<R>(sql)).rows;
  } finally {
    await c.end();
  }
}

describeAdminVerbs("postgres.database", () => ({
  admin: async (user, password) => {
    await server.query(`create role ${user} superuser login password '${password}'`);
    return {
      adapter: createAdapter(Kinds.PostgresDatabase, providerOf(server, { admin: { username: user, password: "unused" } })),
      remove: async () => {
        await server.query(`drop role ${user}`);
      },
    };
  },
  restart: async () => {
    await server.stop({ keepData: true });
    await server.start();
  },
  unreachable: (user) =>
    createAdapter(Kinds.PostgresDatabase, providerOf(server, { endpoint: `postgres://127.0.0.1:${deadPort}`, admin: { username: user, password: "unused" } })),
}));

describe("postgres.database adapter", () => {
  let adapter: ProviderAdapter;
  beforeAll(() => {
    adapter = createAdapter(Kinds.PostgresDatabase, providerOf(server));
  });
  afterAll(async () => {
    await adapter?.close();
  });

  it("binds what a holder needs, and the uri alone connects", async () => {
    const grant = freshGrant();
    const secret = adapter.generate();
    const { resource, bindings } = await adapter.create({ grant, secret });
    const base = `${grant.module.replaceAll("-", "__")}_${grant.requirement}`;
    expect(resource).toEqual({ database: base, group: base, role: `${base}_a` });
    expect(bindings).toEqual({
      type: "postgresql",
      provider: "pg-test",
      host: "127.0.0.1",
      port: String(server.port),
      database: base,
      username: `${base}_a`,
      password: secret.password,
      uri: `postgresql://${base}_a:${encodeURIComponent(secret.password!)}@127.0.0.1:${server.port}/${base}`,
    });
    expect(await asHolder(bindings, "select current_user, session_user")).toEqual([{ current_user: base, session_user: `${base}_a` }]);
    await adapter.delete({ grant });
  });

  it("generation 1 creates a table that generation 2 reads and writes: the group owns it", async () => {
    const grant = freshGrant(1);
    const g1 = await adapter.create({ grant, secret: adapter.generate() });
    await asHolder(g1.bindings, "create table orders (id int primary key, item text)");
    await asHolder(g1.bindings, "insert into orders values (1, 'tea')");

    const g2 = await adapter.create({ grant: { ...grant, generation: 2 }, secret: adapter.generate() });
    expect(g2.bindings.username).toBe(`${g1.resource.group}_b`);
    expect(g2.bindings.database).toBe(g1.bindings.database);
    expect(await asHolder(g2.bindings, "select item from orders")).toEqual([{ item: "tea" }]);
    await asHolder(g2.bindings, "insert into orders values (2, 'coffee')");
    await asHolder(g2.bindings, "create table invoices (id int)");
    expect(await asHolder(g1.bindings, "select count(*)::int as n from orders")).toEqual([{ n: 2 }]);
    await asHolder(g1.bindings, "insert into invoices values (1)");
    const owners = await asHolder<{ tableowner: string }>(g1.bindings, "select tableowner from pg_tables where schemaname = 'public' order by tablename");
    expect(owners).toEqual([{ tableowner: g1.resource.group }, { tableowner: g1.resource.group }]);
    await adapter.delete({ grant });
  });

  it("another grant's credential cannot connect to this grant's database", async () => {
    const mine = await adapter.create({ grant: freshGrant(), secret: adapter.generate() });
    const theirs = await adapter.create({ grant: freshGrant(), secret: adapter.generate() });
    const crossed = { ...theirs.bindings, database: mine.bindings.database! };
    expect(await adapter.login({ bindings: crossed })).toMatchObject({ ok: false, reason: "rejected" });
  });

  it("login says missing for a database that does not exist", async () => {
    const { bindings } = await adapter.create({ grant: freshGrant(), secret: adapter.generate() });
    expect(await adapter.login({ bindings: { ...bindings, database: "no_such_database" } })).toMatchObject({ ok: false, reason: "missing" });
  });

  it("refuses the injection name before any SQL: the admin role survives and no such role exists", async () => {
    for (const grant of [
      { module: INJECTION_NAME, requirement: "db", generation: 1 },
      { module: "shop", requirement: INJECTION_NAME, generation: 1 },
    ]) {
      const e = await expectMeshError(adapter.create({ grant, secret: adapter.generate() }), ErrorCodes.InvalidName);
      expect(e.message).toMatch(/refused/);
    }
    expect((await server.query("select rolname from pg_roles where rolname = 'postgres' or rolname like 'x%'")).rows).toEqual([{ rolname: "postgres" }]);
  });

  it("never takes over a role or database the mesh did not make", async () => {
    const grant = freshGrant();
    const base = `${grant.module.replaceAll("-", "__")}_${grant.requirement}`;
    await server.query(`create role "${base}" login password 'theirs'`);
    const e = await expectMeshError(adapter.create({ grant, secret: adapter.generate() }), ErrorCodes.Conflict);
    expect(e.message).toContain(base);
    expect(e.message).toMatch(/drop or rename/);
    const seen = await adapter.observe({ grant });
    expect(seen.exists).toBe(false);
    expect(seen.details.conflict).toContain(base);
    await adapter.delete({ grant }); // leaves what is not the mesh's alone
    expect((await server.query("select rolcanlogin from pg_roles where rolname = $1", [base])).rows).toEqual([{ rolcanlogin: true }]);
    await server.query(`drop role "${base}"`);

    const other = freshGrant();
    const otherBase = `${other.module.replaceAll("-", "__")}_${other.requirement}`;
    await server.query(`create database "${otherBase}"`);
    await expectMeshError(adapter.create({ grant: other, secret: adapter.generate() }), ErrorCodes.Conflict);
    await adapter.delete({ grant: other });
    expect((await server.query("select datname from pg_database where datname = $1", [otherBase])).rows).toHaveLength(1);
    await server.query(`drop database "${otherBase}"`);
  });

  it("works with an admin that is not a superuser (CREATEROLE, CREATEDB)", async () => {
    await server.query("create role mesh_admin login createrole createdb password 'admin-pass'");
    const limited = createAdapter(Kinds.PostgresDatabase, providerOf(server, { admin: { username: "mesh_admin", password: "admin-pass" } }));
    try {
      const grant = freshGrant();
      const { bindings } = await limited.create({ grant, secret: limited.generate() });
      expect(await limited.login({ bindings })).toEqual({ ok: true });
      await asHolder(bindings, "create table t (x int)");
      expect((await limited.observe({ grant })).exists).toBe(true);
      await limited.delete({ grant });
      expect((await limited.observe({ grant })).exists).toBe(false);
    } finally {
      await limited.close();
    }
  });

  it("a wrong admin password is ProviderMisconfigured, naming the user and where the password comes from", async () => {
    const wrong = createAdapter(Kinds.PostgresDatabase, providerOf(server, { admin: { username: "postgres", password: "not-the-password" } }));
    try {
      const e = await expectMeshError(wrong.observe({ grant: freshGrant() }), ErrorCodes.ProviderMisconfigured);
      expect(e.message).toContain('"postgres"');
      expect(e.message).toMatch(/passwordEnv|passwordFile/);
      expect(e.message).not.toContain("not-the-password");
      expect(isMeshError(e) && e.retryable).toBe(false);
    } finally {
      await wrong.close();
    }
  });

  it("setAdminPassword stores a SCRAM verifier: the plaintext never reaches the server", async () => {
    await server.query("create role admin_scram superuser login password 'generation-1'");
    const admin = createAdapter(Kinds.PostgresDatabase, providerOf(server, { admin: { username: "admin_scram", password: "unused" } }));
    try {
      await admin.setAdminPassword!({ current: "generation-1", next: "generation-2" });
      const [row] = (await server.query<{ rolpassword: string }>("select rolpassword from pg_authid where rolname = 'admin_scram'")).rows;
      expect(row!.rolpassword).toMatch(/^SCRAM-SHA-256\$/);
    } finally {
      await admin.close();
      await server.query("drop role admin_scram");
    }
  });

  it("stores a SCRAM verifier computed as PostgreSQL computes it", async () => {
    await server.query("create role scram_check password 'p4ss-word'");
    const [row] = (await server.query<{ rolpassword: string }>("select rolpassword from pg_authid where rolname = 'scram_check'")).rows;
    const m = /^SCRAM-SHA-256\$(\d+):([^$]+)\$/.exec(row!.rolpassword);
    expect(m).not.toBeNull();
    expect(scramSha256Verifier("p4ss-word", Buffer.from(m![2]!, "base64"), Number(m![1]))).toBe(row!.rolpassword);
    await server.query("drop role scram_check");
  });

  it("a stopped server is unreachable; once it is back, the same credential logs in again", async () => {
    const grant = freshGrant();
    const { bindings } = await adapter.create({ grant, secret: adapter.generate() });
    await server.stop({ keepData: true });
    try {
      expect(await adapter.login({ bindings })).toMatchObject({ ok: false, reason: "unreachable" });
      const e = await expectMeshError(adapter.observe({ grant }), ErrorCodes.ProviderUnreachable);
      expect(e.message).toContain(server.endpoint);
    } finally {
      await server.start();
    }
    expect(await adapter.login({ bindings })).toEqual({ ok: true });
    expect((await adapter.observe({ grant })).exists).toBe(true);
    await adapter.delete({ grant });
  });
});
