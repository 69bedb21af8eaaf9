/**
 * The redis.user adapter against the machine's Redis (127.0.0.1:6379, `default` without a
 * password), and against a Redis of its own that requires authentication and keeps its users in
 * an ACL file.
 */
import { createServer, type AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Redis } from "ioredis";
import { ErrorCodes, isMeshError } from "@mesh/shared";
import type { BindingValues, ProviderAdapter, ProviderConfig } from "@mesh/providers";
import { createRedisAdapter } from "../../packages/providers/src/redis.js";
import { freePort } from "../harness/ports.js";
import { startOwnRedis, type OwnRedis } from "../harness/redis.js";
import { INJECTION_NAME, describeAdminVerbs, describeProviderConformance, expectMeshError, freshGrant } from "./provider-conformance.js";

const ENDPOINT = "redis://127.0.0.1:6379";
let deadPort: number;

beforeAll(async () => {
  deadPort = await freePort();
});

const providerOf = (over: Partial<ProviderConfig> = {}): ProviderConfig => ({ name: "redis-test", node: "node-a", endpoint: ENDPOINT, ...over });

describeProviderConformance("redis.user", () => createRedisAdapter(providerOf()), {
  stateful: true,
  wrongCredential: (b) => ({ ...b, password: `${b.password}x` }),
  unreachable: {
    makeAdapter: () => createRedisAdapter(providerOf({ endpoint: `redis://127.0.0.1:${deadPort}` })),
    bindings: (b) => ({ ...b, port: String(deadPort) }),
  },
});

/** A client that fails at once instead of reconnecting; `default` unless a uri is given. */
async function client(uriOrPort: string | number = 6379): Promise<Redis> {
  const opts = { lazyConnect: true, enableReadyCheck: false, retryStrategy: () => null, maxRetriesPerRequest: 0 };
  const c = typeof uriOrPort === "string" ? new Redis(uriOrPort, opts) : new Redis({ host: "127.0.0.1", port: uriOrPort, ...opts });
  c.on("error", () => {});
  await c.connect();
  return c;
}

/** A holder's connection, made from the binding's uri alone. */
const asHolder = (bindings: BindingValues) => client(bindings.uri!);

/** The hashes of the passwords user `name` has. */
async function passwordsOf(admin: Redis, name: string): Promise<string[]> {
  const reply = (await admin.call("ACL", "GETUSER", name)) as unknown[] | null;
  if (!reply) return [];
  return reply[reply.indexOf("passwords") + 1] as string[];
}

describe("redis.user adapter", () => {
  let adapter: ProviderAdapter;
  let admin: Redis;
  beforeAll(async () => {
    adapter = createRedisAdapter(providerOf());
    admin = await client();
  });
  afterAll(async () => {
    await adapter?.close();
    admin?.disconnect();
  });

  const create = (grant = freshGrant(), secret = adapter.generate()) => adapter.create({ grant, secret });

  it("binds what a holder needs, and the uri alone connects", async () => {
    const grant = freshGrant();
    const secret = adapter.generate();
    const { resource, bindings } = await create(grant, secret);
    const user = `mesh.${grant.module}.${grant.requirement}`;
    expect(resource).toEqual({ user, keyPrefix: `${grant.module}:` });
    expect(bindings).toEqual({
      type: "redis",
      provider: "redis-test",
      host: "127.0.0.1",
      port: "6379",
      username: user,
      password: secret.password,
      "key-prefix": `${grant.module}:`,
      uri: `redis://${user}:${secret.password}@127.0.0.1:6379`,
    });
    const holder = await asHolder(bindings);
    expect(await holder.call("ACL", "WHOAMI")).toBe(user);
    holder.disconnect();
    await adapter.delete({ grant });
  });

  it("the user reaches its module's keys and channels, and nothing else", async () => {
    const grant = freshGrant();
    const { bindings } = await create(grant);
    const holder = await asHolder(bindings);
    const other = `other-${grant.module}:x`;
    try {
      expect(await holder.set(`${grant.module}:x`, "tea")).toBe("OK");
      expect(await holder.get(`${grant.module}:x`)).toBe("tea");
      expect(await holder.publish(`${grant.module}:events`, "hi")).toBe(0);
      await admin.set(other, "theirs");
      const refused: Array<[string, ...string[]]> = [
        ["GET", other],
        ["SET", other, "mine"],
        ["PUBLISH", "other:events", "hi"],
        ["FLUSHALL"],
        ["FLUSHDB"],
        ["CONFIG", "GET", "maxmemory"],
        ["KEYS", "*"],
        ["ACL", "GETUSER", bindings.username!],
        ["ACL", "LIST"],
        ["FUNCTION", "FLUSH"],
        ["SCRIPT", "FLUSH"],
        ["CLIENT", "KILL", "USER", "default"],
        ["SHUTDOWN"],
        // The mesh's own keys: no module's prefix covers `_mesh:`.
        ["GET", `_mesh:acl:${bindings.username}`],
      ];
      for (const [cmd, ...args] of refused) await expect(holder.call(cmd, ...args), `${cmd} ${args.join(" ")}`).rejects.toThrow(/NOPERM/);
      expect(await admin.get(other)).toBe("theirs");
      // A script runs with the caller's rights.
      await expect(holder.eval("return redis.call('GET', KEYS[1])", 1, other)).rejects.toThrow(/NOPERM|permission/);
    } finally {
      holder.disconnect();
      await admin.del(`${grant.module}:x`, other);
      await adapter.delete({ grant });
    }
  });

  it("both generations log in during the overlap; retire removes only the old password, and open connections stay", async () => {
    const grant = freshGrant(1);
    const g1 = await create(grant);
    const g2 = await create({ ...grant, generation: 2 });
    const user = g1.bindings.username!;
    expect(g2.bindings.username).toBe(user);
    expect(await passwordsOf(admin, user)).toHaveLength(2);
    const h1 = await asHolder(g1.bindings);
    const h2 = await asHolder(g2.bindings);
    await adapter.retire({ grant });
    expect(await passwordsOf(admin, user)).toHaveLength(1);
    expect(await adapter.login({ bindings: g1.bindings })).toMatchObject({ ok: false, reason: "rejected" });
    expect(await adapter.login({ bindings: g2.bindings })).toEqual({ ok: true });
    // Not killed (see retire): the next generation's holders share the user.
    expect(await h2.ping()).toBe("PONG");
    expect(await h1.ping()).toBe("PONG");
    h1.disconnect();
    h2.disconnect();
    await adapter.delete({ grant });
  });

  it("re-creating a generation with a new secret converges, and keeps the generation before it", async () => {
    const grant = freshGrant(1);
    const g1 = await create(grant);
    const first = await create({ ...grant, generation: 2 });
    const again = await create({ ...grant, generation: 2 });
    expect(await adapter.login({ bindings: g1.bindings })).toEqual({ ok: true });
    expect(await adapter.login({ bindings: again.bindings })).toEqual({ ok: true });
    expect(await adapter.login({ bindings: first.bindings })).toMatchObject({ ok: false, reason: "rejected" });
    expect(await passwordsOf(admin, g1.bindings.username!)).toHaveLength(2);
    await adapter.delete({ grant });
  });

  it("retire is by generation: retiring 1 after 3 took its slot leaves 3 working", async () => {
    const grant = freshGrant(1);
    await create(grant);
    const g2 = await create({ ...grant, generation: 2 });
    const g3 = await create({ ...grant, generation: 3 });
    await adapter.retire({ grant: { ...grant, generation: 1 } });
    expect(await adapter.login({ bindings: g3.bindings })).toEqual({ ok: true });
    expect(await adapter.login({ bindings: g2.bindings })).toEqual({ ok: true });
    expect((await adapter.observe({ grant: { ...grant, generation: 1 } })).exists).toBe(false);
    expect((await adapter.observe({ grant: { ...grant, generation: 3 } })).exists).toBe(true);
    await adapter.delete({ grant });
  });

  it("two provisioners creating at once converge on one password", async () => {
    const other = createRedisAdapter(providerOf());
    const grant = freshGrant();
    const [a, b] = await Promise.all([create(grant), other.create({ grant, secret: other.generate() })]);
    const logins = [await adapter.login({ bindings: a.bindings }), await adapter.login({ bindings: b.bindings })];
    expect(logins.filter((l) => l.ok)).toHaveLength(1);
    expect(await passwordsOf(admin, a.bindings.username!)).toHaveLength(1);
    expect((await adapter.observe({ grant })).exists).toBe(true);
    await other.close();
    await adapter.delete({ grant });
  });

  it("never takes over a user the mesh did not make", async () => {
    const grant = freshGrant();
    const user = `mesh.${grant.module}.${grant.requirement}`;
    await admin.call("ACL", "SETUSER", user, "on", ">theirs", "~*", "+@all");
    try {
      const before = await admin.call("ACL", "GETUSER", user);
      const e = await expectMeshError(create(grant), ErrorCodes.Conflict);
      expect(e.message).toContain(user);
      expect(e.message).toMatch(/ACL DELUSER/);
      const seen = await adapter.observe({ grant });
      expect(seen.exists).toBe(false);
      expect(seen.details.conflict).toContain(user);
      await adapter.retire({ grant });
      await adapter.delete({ grant }); // leaves what is not the mesh's alone
      expect(await admin.call("ACL", "GETUSER", user)).toEqual(before);
      const theirs = await client();
      expect(await theirs.call("AUTH", user, "theirs")).toBe("OK");
      theirs.disconnect();
    } finally {
      await admin.call("ACL", "DELUSER", user);
    }
  });

  it("a user deleted behind the mesh's back is observed missing, and create makes it again", async () => {
    const grant = freshGrant();
    const secret = adapter.generate();
    const { bindings } = await create(grant, secret);
    await admin.call("ACL", "DELUSER", bindings.username!);
    expect(await adapter.login({ bindings })).toMatchObject({ ok: false, reason: "rejected" });
    expect(await adapter.observe({ grant })).toEqual({ exists: false, details: {} });
    await adapter.retire({ grant }); // must not bring it back
    expect(await passwordsOf(admin, bindings.username!)).toEqual([]);
    await create(grant, secret);
    expect(await adapter.login({ bindings })).toEqual({ ok: true });
    await adapter.delete({ grant });
  });

  it("a user changed behind the mesh's back is put back by create", async () => {
    const grant = freshGrant();
    const secret = adapter.generate();
    const { bindings } = await create(grant, secret);
    await admin.call("ACL", "SETUSER", bindings.username!, "~*", "+@dangerous", ">extra");
    await create(grant, secret);
    const holder = await asHolder(bindings);
    await expect(holder.call("FLUSHALL")).rejects.toThrow(/NOPERM/);
    await expect(holder.get("other:x")).rejects.toThrow(/NOPERM/);
    holder.disconnect();
    expect(await passwordsOf(admin, bindings.username!)).toHaveLength(1);
    await adapter.delete({ grant });
  });

  it("delete ends the user's connections and keeps the module's keys", async () => {
    const grant = freshGrant();
    const { bindings } = await create(grant);
    const holder = await asHolder(bindings);
    await holder.set(`${grant.module}:kept`, "1");
    await adapter.delete({ grant });
    await expect(holder.ping()).rejects.toThrow();
    holder.disconnect();
    expect(await admin.call("ACL", "GETUSER", bindings.username!)).toBeNull();
    expect(await admin.exists(`_mesh:acl:${bindings.username}`)).toBe(0);
    expect(await admin.get(`${grant.module}:kept`)).toBe("1");
    await admin.del(`${grant.module}:kept`);
  });

  it("refuses the injection name and glob characters before Redis sees them", async () => {
    const users = await admin.call("ACL", "USERS");
    for (const grant of [
      { module: INJECTION_NAME, requirement: "res", generation: 1 },
      { module: "conf", requirement: INJECTION_NAME, generation: 1 },
      { module: "a*", requirement: "res", generation: 1 },
      { module: "conf", requirement: "r?", generation: 1 },
    ]) {
      await expectMeshError(adapter.create({ grant, secret: adapter.generate() }), ErrorCodes.InvalidName);
      await expectMeshError(adapter.retire({ grant }), ErrorCodes.InvalidName);
    }
    expect(await admin.call("ACL", "USERS")).toEqual(users);
  });

  it("a server that accepts connections but never answers is unreachable, after the timeout", async () => {
    const silent = createServer(() => {});
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
    try {
      const port = String((silent.address() as AddressInfo).port);
      const grant = freshGrant();
      const { bindings } = await create(grant);
      const started = Date.now();
      expect(await adapter.login({ bindings: { ...bindings, port } })).toMatchObject({
        ok: false,
        reason: "unreachable",
        message: expect.stringMatching(/timed out/),
      });
      expect(Date.now() - started).toBeLessThan(10_000);
      await adapter.delete({ grant });
    } finally {
      silent.close();
    }
  });

  it("refuses an endpoint it cannot use, naming the provider", () => {
    for (const endpoint of ["redis://u:p@127.0.0.1:6379", "redis://127.0.0.1:6379/1", "http://127.0.0.1:6379", "not a url"]) {
      let err: unknown;
      try {
        createRedisAdapter(providerOf({ endpoint }));
      } catch (e) {
        err = e;
      }
      expect(isMeshError(err, ErrorCodes.ProviderMisconfigured), endpoint).toBe(true);
      expect((err as Error).message).toContain("redis-test");
      expect((err as Error).message).not.toContain(":p@");
    }
  });

  it("reaches a rediss:// endpoint only with tls to verify it, and never a redis:// one with tls", async () => {
    // Made from the document alone (an agent's, for logins that take the binding's bundle); its admin refuses to connect unverified.
    const unverified = createRedisAdapter(providerOf({ endpoint: "rediss://127.0.0.1:6379" }));
    await expect(unverified.observe({ grant: freshGrant() })).rejects.toMatchObject({
      code: ErrorCodes.ProviderMisconfigured,
      message: expect.stringContaining("provider redis-test: endpoint rediss://127.0.0.1:6379 is rediss:// (TLS), but the provider says no tls"),
    });
    expect(() => createRedisAdapter(providerOf({ endpoint: ENDPOINT, tls: { ca: "-----BEGIN CERTIFICATE-----" } }))).toThrow(
      "provider redis-test: tls is given, but the endpoint is redis://; name the server rediss://host:port",
    );
  });
});

describe("redis.user on a Redis that requires authentication", () => {
  let server: OwnRedis;
  let adapter: ProviderAdapter;
  const providerOn = (s: OwnRedis, admin?: ProviderConfig["admin"]) => providerOf({ endpoint: s.endpoint, ...(admin ? { admin } : {}) });
  beforeAll(async () => {
    server = await startOwnRedis();
    adapter = createRedisAdapter(providerOn(server, { username: server.adminUser, password: server.adminPassword }));
  });
  afterAll(async () => {
    await adapter?.close();
    await server?.stop();
  });

  it("works with the admin's password, and the users outlive a restart (saved to the ACL file)", async () => {
    const grant = freshGrant(1);
    const g1 = await adapter.create({ grant, secret: adapter.generate() });
    const g2 = await adapter.create({ grant: { ...grant, generation: 2 }, secret: adapter.generate() });
    await server.stop({ keepData: true });
    await server.start();
    expect(await adapter.login({ bindings: g1.bindings })).toEqual({ ok: true });
    expect(await adapter.login({ bindings: g2.bindings })).toEqual({ ok: true });
    // The record came back with the user: retire still knows which password is generation 1's.
    await adapter.retire({ grant });
    expect(await adapter.login({ bindings: g1.bindings })).toMatchObject({ ok: false, reason: "rejected" });
    expect((await adapter.observe({ grant: { ...grant, generation: 2 } })).exists).toBe(true);
    await adapter.delete({ grant });
  });

  it("a wrong admin password is ProviderMisconfigured, naming the user and where the password comes from", async () => {
    const wrong = createRedisAdapter(providerOn(server, { username: server.adminUser, password: "not-the-password" }));
    const e = await expectMeshError(wrong.observe({ grant: freshGrant() }), ErrorCodes.ProviderMisconfigured);
    expect(e.message).toContain(`"${server.adminUser}"`);
    expect(e.message).toMatch(/passwordEnv|passwordFile/);
    expect(e.message).not.toContain("not-the-password");
    expect(JSON.stringify((e as Error & { cause?: unknown }).cause ?? {})).not.toContain("not-the-password");
    expect(isMeshError(e) && e.retryable).toBe(false);
  });

  it("no admin at all is ProviderMisconfigured, saying to give one", async () => {
    const none = createRedisAdapter(providerOn(server));
    const e = await expectMeshError(none.create({ grant: freshGrant(), secret: none.generate() }), ErrorCodes.ProviderMisconfigured);
    expect(e.message).toMatch(/requires authentication.*admin\.username/);
  });

  it("an admin without the ACL commands is ProviderMisconfigured, saying what it needs", async () => {
    const root = await client(server.port);
    await root.call("AUTH", server.adminUser, server.adminPassword);
    await root.call("ACL", "SETUSER", "reader", "on", ">reader-pass", "~*", "+@read", "+auth");
    try {
      const reader = createRedisAdapter(providerOn(server, { username: "reader", password: "reader-pass" }));
      const e = await expectMeshError(reader.observe({ grant: freshGrant() }), ErrorCodes.ProviderMisconfigured);
      expect(e.message).toMatch(/"reader" lacks a permission.*ACL commands/);
    } finally {
      await root.call("ACL", "DELUSER", "reader");
      root.disconnect();
    }
  });

  describeAdminVerbs("redis.user", () => ({
    admin: async (user, password) => {
      const root = await client(server.port);
      await root.call("AUTH", server.adminUser, server.adminPassword);
      await root.call("ACL", "SETUSER", user, "on", `>${password}`, "~*", "&*", "+@all");
      await root.call("ACL", "SAVE");
      root.disconnect();
      return {
        adapter: createRedisAdapter(providerOn(server, { username: user, password: "unused" })),
        remove: async () => {
          const r = await client(server.port);
          await r.call("AUTH", server.adminUser, server.adminPassword);
          await r.call("ACL", "DELUSER", user);
          await r.call("ACL", "SAVE");
          r.disconnect();
        },
      };
    },
    restart: async () => {
      await server.stop({ keepData: true });
      await server.start();
    },
    unreachable: (user) => createRedisAdapter(providerOf({ endpoint: `redis://127.0.0.1:${deadPort}`, admin: { username: user, password: "unused" } })),
  }));

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
