/**
 * Providers that say `tls:`, each against a server of the test's own that accepts clients over
 * TLS alone (a PostgreSQL with only `hostssl` lines, a MariaDB with `require_secure_transport`,
 * a Redis with only its TLS port, a RabbitMQ with TLS listeners alone, a registry and its token
 * issuer serving HTTPS alone, a Verdaccio serving HTTPS alone), its certificate issued by a fresh
 * authority: provisioning, verification, rotation, retirement and
 * take-back all go over verified TLS, a holder connects with the values of its binding alone,
 * and a server whose certificate does not verify (another name, another authority) or that does
 * not speak TLS is `ProviderUnreachable`, naming why.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import pg from "pg";
import mysql from "mysql2/promise";
import { randomBytes } from "node:crypto";
import { Redis } from "ioredis";
import amqplib from "amqplib";
import { DeleteReply, ErrorCodes, Kinds, subjects, type Kind, type ModuleDoc, type ProviderDoc, type ProviderTls } from "@mesh/shared";
import { CredentialStore, createAdapter, providerConfig, type Artifact, type Authority } from "@mesh/providers";
import { bindingPath } from "@mesh/agent";
import type { Rotator } from "@mesh/rotator";
import { startPostgres } from "./harness/postgres.js";
import { startOwnRedis } from "./harness/redis.js";
import { startOwnMariadb } from "./harness/mariadb.js";
import { startOwnRabbitmq } from "./harness/rabbitmq.js";
import { LOOPBACK_NAMES, serverCertificate, testAuthority, type ServerCertificate } from "./harness/server-certificate.js";
import { rotateCommitted, startMeshRotator, startTestMesh, type TestMesh } from "./mesh.js";
import { waitFor } from "./harness/wait.js";
import { waitVerified } from "./verify-helpers.js";
import { startOwnOciRegistry } from "./harness/oci-registry.js";
import { startOwnVerdaccio } from "./harness/verdaccio.js";
import { OciHolder } from "./harness/oci-client.js";
import { npm } from "./harness/npm-cli.js";

const INTERVAL = 1_000;
/** Two intervals, the confirming pause of a new failure and a margin for a busy machine. */
const WITHIN = 2 * INTERVAL + 1_000 + 4_000;
/** The variable the providers' admin password is read from. */
const ADMIN_ENV = "TLS_TEST_ADMIN_PASSWORD";

/** A server of the test's own, as each kind's harness starts one. */
interface OwnServer {
  endpoint: string;
  /** Who the provider administers it as; none for a server administered otherwise (Verdaccio's users directory). */
  adminUser?: string;
  adminPassword: string;
  /** The provider's options it needs (RabbitMQ's management URL, the registries' issuer or users directory). */
  options?: Record<string, string>;
  presentCertificate(cert: ServerCertificate): Promise<void>;
  stop(): Promise<void>;
}

/** What differs by kind. */
interface KindUnderTest {
  kind: Kind;
  /** Starts a server presenting `tls`, or a plain one without it. */
  start(tls?: ServerCertificate): Promise<OwnServer>;
  /** That a client without TLS gets nothing from the server. */
  refusesPlain(server: OwnServer): Promise<void>;
  /** Connects as a holder from the binding directory alone; says who it is logged in as. */
  holderSession(dir: string): Promise<string>;
  /** For a registry: an artifact the grant does not hold, which a handover's copy looks up before it writes. */
  absent?: Artifact;
}

const read = (dir: string, key: string) => readFileSync(join(dir, key), "utf8");
/** The bundle a binding carries: `ca.crt`, or libpq's `sslrootcert` for PostgreSQL. */
const bundleIn = (dir: string) => (existsSync(join(dir, "ca.crt")) ? read(dir, "ca.crt") : read(dir, "sslrootcert"));
/** Versions published by the npm holder so far. */
let published = 0;
/** The same URL over plain HTTP: what a client without TLS asks. */
const plainHttp = (url: string) => url.replace(/^https:/, "http:");

const KINDS: KindUnderTest[] = [
  {
    kind: Kinds.PostgresDatabase,
    start: (tls) => startPostgres(tls ? { tls } : {}),
    async refusesPlain(server) {
      const { hostname, port } = new URL(server.endpoint);
      const c = new pg.Client({ host: hostname, port: Number(port), user: server.adminUser, password: server.adminPassword, database: "postgres", ssl: false });
      await expect(c.connect()).rejects.toThrow(/no encryption/);
      await c.end().catch(() => undefined);
    },
    async holderSession(dir) {
      expect(read(dir, "sslmode")).toBe("verify-full");
      expect(read(dir, "uri")).toMatch(/\?sslmode=verify-full$/);
      // libpq's own way: the uri, and sslrootcert naming the binding's file (node-postgres reads it as libpq does).
      const c = new pg.Client({
        connectionString: `${read(dir, "uri")}&sslrootcert=${encodeURIComponent(join(dir, "sslrootcert"))}`,
        connectionTimeoutMillis: 5_000,
      });
      await c.connect();
      try {
        return (await c.query<{ user: string }>("select session_user as user")).rows[0]!.user;
      } finally {
        await c.end();
      }
    },
  },
  {
    kind: Kinds.MariadbDatabase,
    start: (tls) => startOwnMariadb({ adminPassword: randomBytes(12).toString("hex"), ...(tls ? { tls } : {}) }),
    async refusesPlain(server) {
      // MariaDB says only "access denied" to a client without TLS; the same login over TLS is let in.
      const login = (ssl: boolean) =>
        mysql.createConnection({
          host: "127.0.0.1",
          port: Number(new URL(server.endpoint).port),
          user: server.adminUser,
          password: server.adminPassword,
          ...(ssl ? { ssl: { rejectUnauthorized: false } } : {}),
        });
      await expect(login(false)).rejects.toThrow(/Access denied/);
      await (await login(true)).end();
    },
    async holderSession(dir) {
      expect(read(dir, "uri")).toMatch(/\?ssl-mode=VERIFY_IDENTITY$/);
      const c = await mysql.createConnection({
        host: read(dir, "host"),
        port: Number(read(dir, "port")),
        user: read(dir, "username"),
        password: read(dir, "password"),
        database: read(dir, "database"),
        ssl: { ca: read(dir, "ca.crt"), rejectUnauthorized: true, verifyIdentity: true },
      });
      try {
        const [rows] = await c.query<mysql.RowDataPacket[]>("select substring_index(current_user(), '@', 1) as user");
        return String(rows[0]!.user);
      } finally {
        await c.end();
      }
    },
  },
  {
    kind: Kinds.RedisUser,
    start: (tls) => startOwnRedis(tls ? { tls } : {}),
    async refusesPlain(server) {
      const c = new Redis(server.endpoint.replace(/^rediss:/, "redis:"), {
        lazyConnect: true,
        retryStrategy: () => null,
        maxRetriesPerRequest: 0,
        connectTimeout: 2_000,
      });
      c.on("error", () => {});
      await expect(c.connect().then(() => c.ping())).rejects.toThrow();
      c.disconnect();
    },
    async holderSession(dir) {
      expect(read(dir, "uri")).toMatch(/^rediss:\/\//);
      const c = new Redis(read(dir, "uri"), { tls: { ca: read(dir, "ca.crt") }, lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0 });
      c.on("error", () => {});
      await c.connect();
      try {
        return String(await c.call("ACL", "WHOAMI"));
      } finally {
        c.disconnect();
      }
    },
  },
  {
    kind: Kinds.RabbitmqVhost,
    async start(tls) {
      const r = await startOwnRabbitmq(tls ? { tls } : {});
      return {
        endpoint: `${tls ? "amqps" : "amqp"}://127.0.0.1:${r.amqpPort}`,
        adminUser: r.user,
        adminPassword: r.password,
        options: { managementUrl: r.managementUrl },
        presentCertificate: (c) => r.presentCertificate(c),
        stop: () => r.stop(),
      };
    },
    async refusesPlain(server) {
      const { port } = new URL(server.endpoint);
      await expect(
        amqplib.connect({ protocol: "amqp", hostname: "127.0.0.1", port: Number(port), username: "guest", password: "guest" }, { timeout: 3_000 }),
      ).rejects.toThrow();
      await expect(
        fetch(`${server.options!.managementUrl!.replace(/^https:/, "http:")}/api/overview`, { signal: AbortSignal.timeout(3_000) }),
      ).rejects.toThrow();
    },
    async holderSession(dir) {
      expect(read(dir, "uri")).toMatch(/^amqps:\/\//);
      const conn = await amqplib.connect(read(dir, "uri"), { ca: [read(dir, "ca.crt")] });
      try {
        const channel = await conn.createChannel();
        await channel.assertQueue("tls-probe", { autoDelete: true });
        await channel.close();
        return read(dir, "username");
      } finally {
        await conn.close();
      }
    },
  },
  {
    kind: Kinds.OciRegistry,
    async start(tls) {
      const r = await startOwnOciRegistry(tls ? { tls } : {});
      return {
        endpoint: r.registryUrl,
        adminUser: r.admin.username,
        adminPassword: r.admin.password,
        options: { issuerUrl: r.issuerUrl },
        presentCertificate: (c) => r.presentCertificate(c),
        stop: () => r.stop(),
      };
    },
    async refusesPlain(server) {
      // The registry (Go) answers plain HTTP with 400 and nothing else; the issuer (Node) closes the connection.
      const res = await fetch(`${plainHttp(server.endpoint)}/v2/`, { signal: AbortSignal.timeout(3_000) });
      expect(res.status).toBe(400);
      expect(await res.text()).toMatch(/HTTP request to an HTTPS server/);
      await expect(fetch(`${plainHttp(server.options!.issuerUrl!)}/token`, { signal: AbortSignal.timeout(3_000) })).rejects.toThrow();
    },
    async holderSession(dir) {
      expect(read(dir, "url")).toMatch(/^https:\/\//);
      // As docker does with certs.d/<registry>/ca.crt: the binding's bundle alone, for the registry and its realm.
      const holder = new OciHolder({ url: read(dir, "url"), username: read(dir, "username"), password: read(dir, "password"), "ca.crt": read(dir, "ca.crt") });
      await holder.pushBlob(`${read(dir, "namespace")}/probe`, randomBytes(64));
      return read(dir, "username");
    },
    absent: { type: "blob", repository: "never-pushed", digest: `sha256:${"0".repeat(64)}` },
  },
  {
    kind: Kinds.NpmRegistry,
    async start(tls) {
      const v = await startOwnVerdaccio(tls ? { tls } : {});
      return {
        endpoint: v.endpoint,
        adminPassword: "",
        options: { usersDir: v.usersDir },
        presentCertificate: (c) => v.presentCertificate(c),
        stop: () => v.stop(),
      };
    },
    async refusesPlain(server) {
      await expect(fetch(`${plainHttp(server.endpoint)}/-/ping`, { signal: AbortSignal.timeout(3_000) })).rejects.toThrow();
    },
    async holderSession(dir) {
      expect(read(dir, "registry")).toMatch(/^https:\/\//);
      const src = mkdtempSync(join(tmpdir(), "mesh-npm-holder-"));
      try {
        // npm itself publishes, configured by the binding's npmrc; a version of its own each time.
        writeFileSync(join(src, "package.json"), JSON.stringify({ name: `${read(dir, "scope")}/probe`, version: `1.0.${published++}`, license: "UNLICENSED" }));
        const publish = (env: Record<string, string> = {}) =>
          npm(join(dir, "npmrc"), src, ["publish", "--registry", read(dir, "registry"), "--fetch-retries=0"], env);
        // Without the bundle npm refuses the registry's certificate; with ca.crt beside the system's authorities it publishes.
        const untrusting = await publish();
        expect(untrusting.code, untrusting.out).not.toBe(0);
        expect(untrusting.out).toMatch(/SELF_SIGNED_CERT_IN_CHAIN|unable to (get local issuer|verify)/i);
        const trusting = await publish({ NODE_EXTRA_CA_CERTS: join(dir, "ca.crt") });
        expect(trusting.code, trusting.out).toBe(0);
        return read(dir, "username");
      } finally {
        rmSync(src, { recursive: true, force: true });
      }
    },
    absent: { type: "package", name: "never-published", version: "1.0.0", shasum: "0".repeat(40) },
  },
];

/** What a server speaking plain text is, named as one that speaks TLS: the schemes that say TLS. */
const claimingTls = (s: OwnServer): OwnServer => ({
  ...s,
  endpoint: s.endpoint
    .replace(/^redis:/, "rediss:")
    .replace(/^amqp:/, "amqps:")
    .replace(/^http:/, "https:"),
  ...(s.options ? { options: Object.fromEntries(Object.entries(s.options).map(([k, v]) => [k, v.replace(/^http:/, "https:")])) } : {}),
});

function provider(kind: Kind, server: OwnServer, tls: ProviderTls, name = "tls-main"): ProviderDoc {
  return {
    kind: "Provider",
    name,
    serves: [kind],
    node: "node-a",
    endpoint: server.endpoint,
    ...(server.adminUser ? { admin: { username: server.adminUser, passwordEnv: ADMIN_ENV } } : {}),
    ...(server.options ? { options: server.options } : {}),
    tls,
    installed: true,
  };
}

function module_(name: string, kind: Kind): ModuleDoc {
  return {
    kind: "Module",
    name,
    parts: [{ name: "api", node: "node-a", installed: true }],
    requires: [{ name: "db", kind, deletionPolicy: "Delete" }],
  };
}

describe.each(KINDS)("a $kind provider over verified TLS", (k) => {
  let ca: Authority;
  let good: ServerCertificate;
  let server: OwnServer;
  let env: NodeJS.ProcessEnv;
  let mesh: TestMesh;
  let rotator: Rotator;

  /** The provider's adapter as the provisioner makes it, with `tls`. */
  const adapterWith = (s: OwnServer, tls: ProviderTls) =>
    createAdapter(k.kind, providerConfig(provider(k.kind, s, tls), { ...process.env, [ADMIN_ENV]: s.adminPassword }));

  beforeAll(async () => {
    ca = await testAuthority();
    good = await serverCertificate(ca, LOOPBACK_NAMES);
    server = await k.start(good);
    env = { ...process.env, [ADMIN_ENV]: server.adminPassword };
    mesh = await startTestMesh({ env, verifier: { intervalMs: INTERVAL }, probeIntervalMs: INTERVAL });
    rotator = await startMeshRotator(mesh, env, { scheduleCheckMs: INTERVAL });
  });
  afterAll(async () => {
    await rotator?.stop();
    await mesh?.stop();
    await server?.stop();
  });

  it("refuses a client without TLS, so what passes below went over TLS", async () => {
    await k.refusesPlain(server);
  });

  it("provisions, verifies, rotates, retires and takes back over verified TLS; the holder connects with its binding alone", async () => {
    const applied = await mesh.apply([provider(k.kind, server, { ca: ca.bundlePem }), module_("shop", k.kind)]);
    expect(applied.ok, JSON.stringify(applied)).toBe(true);
    await mesh.waitForState("shop", "Ready", 30_000);
    await waitVerified(mesh, "shop", "db", (c) => c.status === "True", "verified", WITHIN);
    const dir = bindingPath(join(mesh.bindingsRoot, "node-a"), "shop", "api", "db");
    const first = await k.holderSession(dir);
    expect(first).toBe(read(dir, "username"));

    await rotateCommitted(mesh, "shop/db", 2);
    await waitVerified(mesh, "shop", "db", (c) => c.status === "True" && c.message.includes("generation 2"), "verified at generation 2", WITHIN);
    expect(await k.holderSession(dir)).toBe(read(dir, "username"));

    // Generation 1 retired over the admin's TLS connection: it logs in no more, as a login over TLS shows.
    const adapter = adapterWith(server, { ca: ca.bundlePem });
    try {
      const store = new CredentialStore(mesh.store.kv.credentials, mesh.masterKey);
      if (k.absent) {
        // A handover copies into the grant as a holder writes, through the generation's binding: over TLS, verified by its ca.crt.
        const grant = { module: "shop", requirement: "db", generation: 2 };
        const g2 = (await store.read("shop", "db", 2))!.bindings!;
        expect(await (await adapter.artifactSink!({ grant, bindings: g2 })).has(k.absent)).toBe(false);
        const foreign = await adapter.artifactSink!({ grant, bindings: { ...g2, "ca.crt": (await testAuthority()).bundlePem } });
        await expect(foreign.has(k.absent)).rejects.toMatchObject({
          code: ErrorCodes.ProviderUnreachable,
          message: expect.stringMatching(/cannot be reached over verified TLS: its certificate is not signed by an authority/),
        });
      }
      const g1 = (await store.read("shop", "db", 1))!.bindings!;
      await waitFor("generation 1 to be retired", async () => (await adapter.login({ bindings: g1 })).ok === false, 15_000);
      expect(await adapter.login({ bindings: g1 })).toMatchObject({ ok: false, reason: "rejected" });

      const del = DeleteReply.parse(
        (await mesh.nc.request(subjects.delete, JSON.stringify({ documents: [{ kind: "Module", name: "shop" }] }), { timeout: 10_000 })).json(),
      );
      expect(del.ok).toBe(true);
      await waitFor(
        "shop/db to be taken back at the server",
        async () => !(await adapter.observe({ grant: { module: "shop", requirement: "db", generation: 2 } })).exists,
        30_000,
      );
    } finally {
      await adapter.close();
    }
  });

  it("a provider whose bundle changes has its grants rotated, so their holders get the bundle it names now", async () => {
    await mesh.apply([module_("rebundled", k.kind)]);
    await mesh.waitForState("rebundled", "Ready", 30_000);
    const dir = bindingPath(join(mesh.bindingsRoot, "node-a"), "rebundled", "api", "db");
    expect(bundleIn(dir)).toBe(ca.bundlePem);
    // The operator adds the next authority to the bundle, as before moving the server to it.
    const next = await testAuthority();
    const bundle = `${ca.bundlePem}${next.bundlePem}`;
    expect((await mesh.apply([provider(k.kind, server, { ca: bundle })])).ok).toBe(true);
    try {
      await waitFor("the grant to be rotated to the new bundle", async () => (await mesh.grant("rebundled", "db"))?.generation === 2, 30_000);
      await waitFor("the holder's binding to carry the new bundle", async () => bundleIn(dir) === bundle, 30_000);
      await waitVerified(mesh, "rebundled", "db", (c) => c.status === "True" && c.message.includes("generation 2"), "verified at generation 2", WITHIN);
      expect(await k.holderSession(dir)).toBe(read(dir, "username"));
    } finally {
      expect((await mesh.apply([provider(k.kind, server, { ca: ca.bundlePem })])).ok).toBe(true);
    }
    // And back: the bundle of one authority again, rotated to once more.
    await waitFor("the holder's binding to carry the bundle of one authority again", async () => bundleIn(dir) === ca.bundlePem, 30_000);
  });

  it("a server presenting a certificate for another name is ProviderUnreachable, saying so, and Verified again once it presents its own", async () => {
    await mesh.apply([module_("named", k.kind)]);
    await mesh.waitForState("named", "Ready", 30_000);
    await waitVerified(mesh, "named", "db", (c) => c.status === "True", "verified", WITHIN);
    await server.presentCertificate(await serverCertificate(ca, { dnsNames: ["db.elsewhere.test"] }));
    try {
      // A server that restarts to present it (the registries) is unreachable for a moment first: that is not the case under test.
      const c = await waitVerified(
        mesh,
        "named",
        "db",
        (c) => c.status === "False" && /over verified TLS/.test(c.message ?? ""),
        "not verified, over TLS",
        WITHIN,
      );
      expect(c.reason).toBe("ProviderUnreachable");
      expect(c.message).toMatch(/over verified TLS: its certificate is not for the name checked/);
      expect(c.message).toContain("tls.serverName");
    } finally {
      await server.presentCertificate(good);
    }
    await waitVerified(mesh, "named", "db", (c) => c.status === "True", "verified again", WITHIN);
  });

  it("a provider whose bundle does not hold the server's authority makes nothing, and a login with it is refused before its password goes", async () => {
    const other = await testAuthority();
    const adapter = adapterWith(server, { ca: other.bundlePem });
    try {
      const grant = { module: "stranger", requirement: "db", generation: 1 };
      await expect(adapter.create({ grant, secret: adapter.generate() })).rejects.toMatchObject({
        code: ErrorCodes.ProviderUnreachable,
        message: expect.stringMatching(
          /cannot be reached over verified TLS, so could not create stranger\/db: its certificate is not signed by an authority of the provider's tls bundle/,
        ),
      });
      const admin = adapterWith(server, { ca: ca.bundlePem });
      try {
        expect((await admin.observe({ grant })).exists).toBe(false);
      } finally {
        await admin.close();
      }
      const { hostname, port } = new URL(server.endpoint);
      const login = await adapter.login({
        bindings: {
          host: hostname,
          port,
          database: "postgres",
          vhost: "/",
          url: server.endpoint,
          registry: `${server.endpoint}/`,
          username: server.adminUser ?? "nobody",
          password: server.adminPassword || "nothing",
          sslmode: "verify-full",
          sslrootcert: other.bundlePem,
          "ca.crt": other.bundlePem,
        },
      });
      expect(login).toMatchObject({ ok: false, reason: "unreachable", message: expect.stringContaining("not signed by an authority") });
    } finally {
      await adapter.close();
    }
  });

  it("a provider that says tls, at a server that does not speak it, is refused before any password is sent", async () => {
    const plain = await k.start();
    const adapter = adapterWith(claimingTls(plain), { ca: ca.bundlePem });
    try {
      await expect(adapter.observe({ grant: { module: "cleartext", requirement: "db", generation: 1 } })).rejects.toMatchObject({
        code: ErrorCodes.ProviderUnreachable,
        // PostgreSQL refuses the request for TLS; Redis waits for a command in plain text, and the handshake times out.
        message: expect.stringMatching(/(it does not speak TLS|it answered no TLS handshake in time) .*nothing falls back to plain text/),
      });
    } finally {
      await adapter.close();
      await plain.stop();
    }
  });
});
