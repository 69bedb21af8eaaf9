/**
 * A PostgreSQL provider that says `tls:`, against a server of the test's own that accepts TCP
 * over TLS alone (a plain connection finds no pg_hba.conf entry), its certificate issued by a
 * mesh authority: provisioning, verification, rotation and take-back all go over verified TLS,
 * a holder connects with the values of its binding alone, and a server whose certificate does
 * not verify (another name, another authority, no TLS at all) is `ProviderUnreachable` naming why.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import pg from "pg";
import { DeleteReply, ErrorCodes, Kinds, Rotation, RotationStates, keys, parseMasterKey, subjects, type ModuleDoc } from "@mesh/shared";
import { readJson } from "@mesh/shared/runtime";
import { createAdapter, issueCertificate, newAuthority, newPrivateKeyPem, openAuthority, providerConfig, sealCaKey, type Authority } from "@mesh/providers";
import { bindingPath } from "@mesh/agent";
import type { Rotator } from "@mesh/rotator";
import { randomBytes } from "node:crypto";
import { startPostgres, type Postgres, type ServerCertificate } from "./harness/postgres.js";
import { startMeshRotator, startTestMesh, type TestMesh } from "./mesh.js";
import { waitFor } from "./harness/wait.js";
import { adminEnv, harnessProvider } from "./fixtures.js";
import { waitVerified } from "./verify-helpers.js";

const INTERVAL = 1_000;
/** Two intervals, the confirming pause of a new failure and a margin for a busy machine. */
const WITHIN = 2 * INTERVAL + 1_000 + 4_000;

/** A fresh authority, as the mesh's CA makes one. */
async function authority(): Promise<Authority> {
  const mk = parseMasterKey(randomBytes(32).toString("hex"));
  const ca = await newAuthority();
  return openAuthority(mk, ca.certificatePem, sealCaKey(mk, ca.keyPem));
}

/** A server certificate of `ca` for `names` (DNS names, and IP addresses among them). */
async function serverCertificate(ca: Authority, names: { dnsNames?: string[]; ipAddresses?: string[] }): Promise<ServerCertificate> {
  const keyPem = newPrivateKeyPem();
  const certPem = await issueCertificate(ca, {
    keyPem,
    dnsNames: names.dnsNames ?? [],
    ipAddresses: names.ipAddresses ?? [],
    lifetimeMs: 3_600_000,
    usage: "server",
  });
  return { certPem, keyPem };
}

function shop(name: string): ModuleDoc {
  return {
    kind: "Module",
    name,
    parts: [{ name: "api", node: "node-a", installed: true }],
    requires: [{ name: "db", kind: "postgres.database", deletionPolicy: "Delete" }],
  };
}

/** Connects as a holder would, from the binding directory alone: its values, and the path of its `sslrootcert` file. */
async function connectFromBinding(dir: string): Promise<pg.Client> {
  const read = (k: string) => readFileSync(join(dir, k), "utf8");
  expect(read("sslmode")).toBe("verify-full");
  expect(read("uri")).toMatch(/\?sslmode=verify-full$/);
  // libpq's own way: the uri, and sslrootcert naming the binding's file (node-postgres reads it as libpq does).
  const c = new pg.Client({ connectionString: `${read("uri")}&sslrootcert=${encodeURIComponent(join(dir, "sslrootcert"))}`, connectionTimeoutMillis: 5_000 });
  await c.connect();
  return c;
}

describe("a PostgreSQL provider over verified TLS", () => {
  let ca: Authority;
  let good: ServerCertificate;
  let db: Postgres;
  let mesh: TestMesh;
  let rotator: Rotator;

  beforeAll(async () => {
    ca = await authority();
    good = await serverCertificate(ca, { dnsNames: ["localhost"], ipAddresses: ["127.0.0.1"] });
    db = await startPostgres({ tls: good });
    mesh = await startTestMesh({ env: adminEnv(db), verifier: { intervalMs: INTERVAL }, probeIntervalMs: INTERVAL });
    rotator = await startMeshRotator(mesh, adminEnv(db));
    const applied = await mesh.apply([harnessProvider(db, { tls: { ca: ca.bundlePem } }), shop("shop")]);
    expect(applied.ok, JSON.stringify(applied)).toBe(true);
  });
  afterAll(async () => {
    await rotator?.stop();
    await mesh?.stop();
    await db?.stop();
  });

  it("refuses a connection without TLS, so what passes below went over TLS", async () => {
    const c = new pg.Client({ host: db.host, port: db.port, user: db.adminUser, password: db.adminPassword, database: "postgres", ssl: false });
    await expect(c.connect()).rejects.toThrow(/no encryption/);
    await c.end().catch(() => undefined);
  });

  it("provisions, verifies, rotates and takes back over verified TLS; the holder connects with its binding alone", async () => {
    await mesh.waitForState("shop", "Ready", 30_000);
    await waitVerified(mesh, "shop", "db", (c) => c.status === "True", "verified", WITHIN);
    const dir = bindingPath(join(mesh.bindingsRoot, "node-a"), "shop", "api", "db");
    const holder = await connectFromBinding(dir);
    try {
      const pid = (await holder.query<{ pid: number }>("select pg_backend_pid() as pid")).rows[0]!.pid;
      // As the server sees that session (the admin sees every session's TLS state).
      const { rows } = await db.query("select a.usename as user, s.ssl from pg_stat_ssl s join pg_stat_activity a using (pid) where pid = $1", [pid]);
      expect(rows[0]).toEqual({ user: "shop_db_a", ssl: true });
    } finally {
      await holder.end();
    }

    const reply = await mesh.nc.request(subjects.rotate, JSON.stringify({ grant: "shop/db" }), { timeout: 15_000 });
    expect(reply.json<{ ok: boolean }>().ok, reply.string()).toBe(true);
    const committed = await waitFor(
      "the rotation of shop/db to commit",
      async () => {
        const r = (await readJson(mesh.store.kv.rotations, keys.grant("shop", "db"), Rotation))?.value;
        return r?.state === RotationStates.Committed && r.to === 2 ? r : undefined;
      },
      30_000,
    );
    expect(committed.from).toBe(1);
    await waitVerified(mesh, "shop", "db", (c) => c.status === "True" && c.message.includes("generation 2"), "verified at generation 2", WITHIN);
    const rotated = await connectFromBinding(dir);
    try {
      expect((await rotated.query<{ user: string }>("select session_user as user")).rows[0]!.user).toBe("shop_db_b");
    } finally {
      await rotated.end();
    }
    // Generation 1 retired over the admin's TLS connection: its role can no longer log in.
    await waitFor(
      "shop_db_a to be retired",
      async () => (await db.query<{ rolcanlogin: boolean }>("select rolcanlogin from pg_roles where rolname = 'shop_db_a'")).rows[0]?.rolcanlogin === false,
      15_000,
    );

    const del = DeleteReply.parse(
      (await mesh.nc.request(subjects.delete, JSON.stringify({ documents: [{ kind: "Module", name: "shop" }] }), { timeout: 10_000 })).json(),
    );
    expect(del.ok).toBe(true);
    await waitFor(
      "shop's database and roles to be dropped",
      async () => {
        const left = await db.query("select 1 from pg_roles where rolname like 'shop\\_db%' union all select 1 from pg_database where datname = 'shop_db'");
        return left.rowCount === 0;
      },
      30_000,
    );
  });

  it("a server presenting a certificate for another name is ProviderUnreachable, saying so, and Verified again once it presents its own", async () => {
    await mesh.apply([shop("named")]);
    await mesh.waitForState("named", "Ready", 30_000);
    await waitVerified(mesh, "named", "db", (c) => c.status === "True", "verified", WITHIN);
    await db.presentCertificate(await serverCertificate(ca, { dnsNames: ["db.elsewhere.test"] }));
    try {
      const c = await waitVerified(mesh, "named", "db", (c) => c.status === "False", "not verified", WITHIN);
      expect(c.reason).toBe("ProviderUnreachable");
      expect(c.message).toMatch(/over verified TLS: its certificate is not for the name checked/);
      expect(c.message).toContain("tls.serverName");
    } finally {
      await db.presentCertificate(good);
    }
    await waitVerified(mesh, "named", "db", (c) => c.status === "True", "verified again", WITHIN);
  });

  it("a provider whose bundle does not hold the server's authority provisions nothing, and says why", async () => {
    const other = await authority();
    const adapter = createAdapter(Kinds.PostgresDatabase, providerConfig(harnessProvider(db, { tls: { ca: other.bundlePem } }), adminEnv(db)));
    try {
      const made = adapter.create({ grant: { module: "stranger", requirement: "db", generation: 1 }, secret: adapter.generate() });
      await expect(made).rejects.toMatchObject({
        code: ErrorCodes.ProviderUnreachable,
        message: expect.stringMatching(
          /cannot be reached over verified TLS, so could not create stranger\/db: its certificate is not signed by an authority of the provider's tls bundle/,
        ),
      });
      expect((await db.query("select 1 from pg_roles where rolname like 'stranger%'")).rowCount).toBe(0);
      // A holder's login with such a binding is refused the same way, before its password is sent.
      const login = await adapter.login({
        bindings: {
          host: db.host,
          port: String(db.port),
          database: "postgres",
          username: db.adminUser,
          password: db.adminPassword,
          sslmode: "verify-full",
          sslrootcert: other.bundlePem,
        },
      });
      expect(login).toMatchObject({ ok: false, reason: "unreachable", message: expect.stringContaining("not signed by an authority") });
    } finally {
      await adapter.close();
    }
  });

  it("a provider that says tls, at a server that does not speak it, is refused before any password is sent", async () => {
    const plain = await startPostgres();
    const adapter = createAdapter(Kinds.PostgresDatabase, providerConfig(harnessProvider(plain, { tls: { ca: ca.bundlePem } }), adminEnv(plain)));
    try {
      await expect(adapter.observe({ grant: { module: "cleartext", requirement: "db", generation: 1 } })).rejects.toMatchObject({
        code: ErrorCodes.ProviderUnreachable,
        message: expect.stringMatching(/it does not speak TLS .*nothing falls back to plain text/),
      });
    } finally {
      await adapter.close();
      await plain.stop();
    }
  });
});
