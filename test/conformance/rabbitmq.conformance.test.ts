/**
 * The rabbitmq.vhost adapter against the test run's own RabbitMQ, which test/global-setup.ts
 * starts with the management plugin on (the machine's has it off) and names in
 * RABBITMQ_TEST_AMQP_PORT, RABBITMQ_TEST_MANAGEMENT_URL, RABBITMQ_TEST_USER and
 * RABBITMQ_TEST_PASSWORD (set them to point elsewhere). The adapter administers it as an
 * administrator of the suite's own, so guest is not needed by the adapter; guest is the
 * suite's view of the server. Every grant the adapters touch is deleted at the end, even when
 * a test failed half-way.
 */
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import amqplib from "amqplib";
import { ErrorCodes, isMeshError } from "@mesh/shared";
import type { BindingValues, GrantRef, ProviderAdapter, ProviderConfig } from "@mesh/providers";
import { createRabbitmqAdapter, rabbitmqPasswordHash } from "../../packages/providers/src/rabbitmq.js";
import { freePort } from "../harness/ports.js";
import { INJECTION_NAME, describeAdminVerbs, describeProviderConformance, recordingAdapter, expectMeshError, freshGrant } from "./provider-conformance.js";

const AMQP_PORT = Number(process.env.RABBITMQ_TEST_AMQP_PORT ?? 5672);
const MANAGEMENT_URL = process.env.RABBITMQ_TEST_MANAGEMENT_URL ?? "http://127.0.0.1:15672";
const ROOT = { user: process.env.RABBITMQ_TEST_USER ?? "guest", password: process.env.RABBITMQ_TEST_PASSWORD ?? "guest" };
const ADMIN = `mesh_test_admin_${randomBytes(4).toString("hex")}`;
const ADMIN_PASSWORD = `adm-${randomBytes(12).toString("hex")}`;

/** The management API as the suite's root user (or `as`), for setting up and checking. */
async function api(
  method: string,
  path: string,
  body?: unknown,
  as = ROOT,
): Promise<{ status: number; json: any }> /* eslint-disable-line @typescript-eslint/no-explicit-any -- the management API answers many shapes */ {
  const res = await fetch(`${MANAGEMENT_URL}/api${path}`, {
    method,
    headers: { authorization: `Basic ${Buffer.from(`${as.user}:${as.password}`).toString("base64")}`, "content-type": "application/json" },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    signal: AbortSignal.timeout(5_000),
  });
  const text = await res.text();
  return { status: res.status, json: text ? JSON.parse(text) : undefined };
}
const enc = encodeURIComponent;

/** Every grant an adapter of this file was asked to create, for the clean-up at the end. */
const touched = new Map<string, Omit<GrantRef, "generation">>();
let deadPorts: { amqp: number; management: number };

beforeAll(async () => {
  const overview = await api("GET", "/overview").catch((e: unknown) => {
    throw new Error(
      `RabbitMQ's management API at ${MANAGEMENT_URL} does not answer (${String(e)}); test/global-setup.ts starts one with the plugin on unless RABBITMQ_TEST_MANAGEMENT_URL names another`,
    );
  });
  expect(overview.status, "the suite's root user must be an administrator").toBe(200);
  expect((await api("PUT", `/users/${ADMIN}`, { password: ADMIN_PASSWORD, tags: ["administrator"] })).status).toBe(201);
  deadPorts = { amqp: await freePort(), management: await freePort() };
});
afterAll(async () => {
  const cleaner = createRabbitmqAdapter(providerOf());
  for (const grant of touched.values()) await cleaner.delete({ grant });
  await cleaner.close();
  await api("DELETE", `/users/${ADMIN}`);
});

const providerOf = (over: Partial<ProviderConfig> = {}): ProviderConfig => ({
  name: "rabbit-test",
  node: "node-a",
  endpoint: `amqp://127.0.0.1:${AMQP_PORT}`,
  admin: { username: ADMIN, password: ADMIN_PASSWORD },
  options: { managementUrl: MANAGEMENT_URL },
  ...over,
});

const makeAdapter = (over: Partial<ProviderConfig> = {}) => recordingAdapter(createRabbitmqAdapter(providerOf(over)), touched);

describeProviderConformance("rabbitmq.vhost", () => makeAdapter(), {
  stateful: true,
  wrongCredential: (b) => ({ ...b, password: `${b.password}x` }),
  unreachable: {
    makeAdapter: () => makeAdapter({ endpoint: `amqp://127.0.0.1:${deadPorts.amqp}`, options: { managementUrl: `http://127.0.0.1:${deadPorts.management}` } }),
    bindings: (b) => ({ ...b, port: String(deadPorts.amqp) }),
  },
});

// No restart: the run's node is shared by this file's tests; the password lives in the node's database.
describeAdminVerbs("rabbitmq.vhost", () => ({
  admin: async (user, password) => {
    expect((await api("PUT", `/users/${user}`, { password, tags: ["administrator"] })).status).toBe(201);
    return {
      adapter: createRabbitmqAdapter(providerOf({ admin: { username: user, password: "unused" } })),
      remove: async () => {
        await api("DELETE", `/users/${user}`);
      },
    };
  },
  unreachable: (user) =>
    createRabbitmqAdapter(
      providerOf({
        endpoint: `amqp://127.0.0.1:${deadPorts.amqp}`,
        admin: { username: user, password: "unused" },
        options: { managementUrl: `http://127.0.0.1:${deadPorts.management}` },
      }),
    ),
}));

/** The base name of a fresh grant (`conf-…/res` → `conf__…_res`). */
const baseOf = (g: Omit<GrantRef, "generation">) => `${g.module.replaceAll("-", "__")}_${g.requirement}`;

/** A holder's connection, opened from the uri alone, as a module would. */
async function holder(b: BindingValues) {
  const conn = await amqplib.connect(b.uri!, { timeout: 3_000 });
  const closed = new Promise<string>((resolve) => conn.on("close", (e?: Error) => resolve(e?.message ?? "closed")));
  conn.on("error", () => {});
  return { conn, closed };
}

/** Resolves to what `p` resolves to, or to "still open" after `ms`. */
const within = (p: Promise<string>, ms: number) => Promise.race([p, new Promise<string>((r) => setTimeout(() => r("still open"), ms))]);

describe("rabbitmq.vhost adapter", () => {
  let adapter: ProviderAdapter;
  beforeAll(() => {
    adapter = makeAdapter();
  });
  afterAll(async () => {
    await adapter?.close();
  });
  const create = (grant: GrantRef) => adapter.create({ grant, secret: adapter.generate() });

  it("binds what a holder needs, and the uri alone connects", async () => {
    const grant = freshGrant();
    const secret = adapter.generate();
    const { resource, bindings } = await adapter.create({ grant, secret });
    const base = baseOf(grant);
    expect(resource).toEqual({ vhost: base, user: `${base}_a` });
    expect(bindings).toEqual({
      type: "rabbitmq",
      provider: "rabbit-test",
      host: "127.0.0.1",
      port: String(AMQP_PORT),
      vhost: base,
      username: `${base}_a`,
      password: secret.password,
      uri: `amqp://${base}_a:${encodeURIComponent(secret.password!)}@127.0.0.1:${AMQP_PORT}/${base}`,
    });
    const { conn } = await holder(bindings);
    await conn.close();
    await adapter.delete({ grant });
  });

  it("marks what it makes, stores a salted SHA-256 hash of the password, and gives no other rights", async () => {
    const grant = freshGrant();
    const secret = adapter.generate();
    const { bindings } = await adapter.create({ grant, secret });
    const mark = `mesh grant ${grant.module}/${grant.requirement}`;
    const user = (await api("GET", `/users/${enc(bindings.username!)}`)).json;
    expect(user.tags).toEqual([mark, "mesh generation 1"]);
    expect(user.hashing_algorithm).toBe("rabbit_password_hashing_sha256");
    expect(rabbitmqPasswordHash(secret.password!, Buffer.from(user.password_hash, "base64").subarray(0, 4))).toBe(user.password_hash);
    expect((await api("GET", `/vhosts/${enc(bindings.vhost!)}`)).json.description).toBe(mark);
    expect((await api("GET", `/users/${enc(bindings.username!)}/permissions`)).json).toEqual([
      { user: bindings.username, vhost: bindings.vhost, configure: ".*", write: ".*", read: ".*" },
    ]);
    // The mark is a tag, but not one that opens the management API.
    const asHolder = await api("GET", "/overview", undefined, { user: bindings.username!, password: secret.password! });
    expect(asHolder.status).toBe(401);
    await adapter.delete({ grant });
  });

  it("generation 1 declares a queue and publishes; generation 2 consumes it, and the other way round", async () => {
    const grant = freshGrant(1);
    const g1 = await create(grant);
    const a = await holder(g1.bindings);
    const ch1 = await a.conn.createConfirmChannel();
    await ch1.assertQueue("orders", { durable: true });
    ch1.sendToQueue("orders", Buffer.from("tea"));
    await ch1.waitForConfirms();
    await a.conn.close();

    const g2 = await create({ ...grant, generation: 2 });
    expect(g2.bindings.username).toBe(`${baseOf(grant)}_b`);
    expect(g2.bindings.vhost).toBe(g1.bindings.vhost);
    const b = await holder(g2.bindings);
    const ch2 = await b.conn.createConfirmChannel();
    const got = await ch2.get("orders", { noAck: true });
    expect(got && got.content.toString()).toBe("tea");
    ch2.sendToQueue("orders", Buffer.from("coffee"));
    await ch2.waitForConfirms();
    await b.conn.close();

    const c = await holder(g1.bindings);
    const back = await (await c.conn.createChannel()).get("orders", { noAck: true });
    expect(back && back.content.toString()).toBe("coffee");
    await c.conn.close();
    await adapter.delete({ grant });
  });

  it("a user of one grant cannot open another grant's vhost", async () => {
    const mine = await create(freshGrant());
    const theirs = await create(freshGrant());
    const crossed = { ...theirs.bindings, vhost: mine.bindings.vhost! };
    expect(await adapter.login({ bindings: crossed })).toMatchObject({ ok: false, reason: "rejected" });
    const uri = theirs.bindings.uri!.replace(/\/[^/]*$/, `/${mine.bindings.vhost}`);
    await expect(amqplib.connect(uri, { timeout: 3_000 })).rejects.toThrow();
  });

  it("login says missing for a vhost that does not exist", async () => {
    const { bindings } = await create(freshGrant());
    expect(await adapter.login({ bindings: { ...bindings, vhost: "no_such_vhost" } })).toMatchObject({ ok: false, reason: "missing" });
  });

  it("retire closes the retired user's open connection and leaves the other generation's open", async () => {
    const grant = freshGrant(1);
    const g1 = await create(grant);
    const g2 = await create({ ...grant, generation: 2 });
    const old = await holder(g1.bindings);
    const current = await holder(g2.bindings);
    await adapter.retire({ grant });
    expect(await within(old.closed, 2_000)).toMatch(/CONNECTION_FORCED/);
    expect(await within(current.closed, 300)).toBe("still open");
    const ch = await current.conn.createChannel();
    await ch.assertQueue("still-here");
    await current.conn.close();
    const refused = await adapter.login({ bindings: g1.bindings });
    expect(refused).toMatchObject({ ok: false, reason: "rejected" });
    expect(JSON.stringify(refused)).not.toContain(g1.bindings.password);
    expect((await adapter.observe({ grant })).details.userLogin).toBe("disabled");
    await adapter.delete({ grant });
  });

  it("delete closes every open connection of the grant", async () => {
    const grant = freshGrant(1);
    const g1 = await create(grant);
    const g2 = await create({ ...grant, generation: 2 });
    const held = [await holder(g1.bindings), await holder(g2.bindings)];
    await adapter.delete({ grant });
    for (const h of held) expect(await within(h.closed, 2_000)).toMatch(/CONNECTION_FORCED/);
    expect((await api("GET", `/vhosts/${baseOf(grant)}`)).status).toBe(404);
  });

  it("provisioners racing on the same grant converge", async () => {
    const grant = freshGrant();
    const secret = adapter.generate();
    const racers = [0, 1, 2, 3].map(() => makeAdapter());
    const results = await Promise.all(racers.map((r) => r.create({ grant, secret })));
    for (const r of results) expect(r).toEqual(results[0]);
    expect(await adapter.login({ bindings: results[0]!.bindings })).toEqual({ ok: true });
    await Promise.all(racers.map((r) => r.delete({ grant })));
    expect((await adapter.observe({ grant })).exists).toBe(false);
  });

  it("never takes over a vhost the mesh did not make, and leaves it untouched", async () => {
    const grant = freshGrant();
    const base = baseOf(grant);
    expect((await api("PUT", `/vhosts/${base}`, { description: "theirs" })).status).toBe(201);
    try {
      const e = await expectMeshError(create(grant), ErrorCodes.Conflict);
      expect(e.message).toContain(base);
      expect(e.message).toMatch(/delete or rename/);
      const seen = await adapter.observe({ grant });
      expect(seen.exists).toBe(false);
      expect(seen.details.conflict).toContain(base);
      await adapter.delete({ grant }); // leaves what is not the mesh's alone
      expect((await api("GET", `/vhosts/${base}`)).json.description).toBe("theirs");
      expect((await api("GET", `/users/${base}_a`)).status).toBe(404);
    } finally {
      await api("DELETE", `/vhosts/${base}`);
    }
  });

  it("never takes over a user the mesh did not make, and leaves its password alone", async () => {
    const grant = freshGrant();
    const user = `${baseOf(grant)}_a`;
    expect((await api("PUT", `/users/${user}`, { password: "theirs", tags: [] })).status).toBe(201);
    const before = (await api("GET", `/users/${user}`)).json;
    try {
      const e = await expectMeshError(create(grant), ErrorCodes.Conflict);
      expect(e.message).toContain(user);
      await adapter.retire({ grant });
      await adapter.delete({ grant });
      expect((await api("GET", `/users/${user}`)).json).toEqual(before);
    } finally {
      await api("DELETE", `/users/${user}`);
    }
  });

  it("refuses the injection name before any request: no such vhost or user appears", async () => {
    const before = (await api("GET", "/vhosts")).json.length;
    for (const grant of [
      { module: INJECTION_NAME, requirement: "mq", generation: 1 },
      { module: "shop", requirement: INJECTION_NAME, generation: 1 },
    ]) {
      const e = await expectMeshError(adapter.create({ grant, secret: adapter.generate() }), ErrorCodes.InvalidName);
      expect(e.message).toMatch(/refused/);
    }
    expect((await api("GET", "/vhosts")).json.length).toBe(before);
    const names: string[] = (await api("GET", "/users")).json.map((u: { name: string }) => u.name);
    expect(names.filter((n) => n.includes('"') || n.includes("DROP"))).toEqual([]);
  });

  it("a wrong admin password is ProviderMisconfigured, naming the user and where the password comes from", async () => {
    const wrong = makeAdapter({ admin: { username: ADMIN, password: "not-the-password" } });
    const e = await expectMeshError(wrong.observe({ grant: freshGrant() }), ErrorCodes.ProviderMisconfigured);
    expect(e.message).toContain(JSON.stringify(ADMIN));
    expect(e.message).toMatch(/passwordEnv|passwordFile/);
    expect(e.message).not.toContain("not-the-password");
    expect(isMeshError(e) && e.retryable).toBe(false);
  });

  it("an admin named guest with no password source administers a broker on this host with RabbitMQ's default password", async () => {
    const asGuest = makeAdapter({ admin: { username: "guest" } });
    const grant = freshGrant();
    const { bindings } = await asGuest.create({ grant, secret: asGuest.generate() });
    expect(await asGuest.observe({ grant })).toMatchObject({ exists: true });
    expect(await asGuest.login({ bindings })).toMatchObject({ ok: true });
    await asGuest.delete({ grant });
    expect((await api("GET", `/vhosts/${enc(bindings.vhost!)}`)).status).toBe(404);
  });

  it("a broker that answers AMQP with its management plugin off is ProviderUnreachable, naming the command that enables it", async () => {
    // The real broker's AMQP port, and a port where no management API listens: what a fresh install looks like.
    const off = makeAdapter({ options: { managementUrl: `http://127.0.0.1:${deadPorts.management}` } });
    const e = await expectMeshError(off.create({ grant: freshGrant(), secret: off.generate() }), ErrorCodes.ProviderUnreachable);
    expect(e.message).toContain("`rabbitmq-plugins enable rabbitmq_management`");
    expect(e.message).toContain(`127.0.0.1:${AMQP_PORT}`);
    expect(isMeshError(e) && e.retryable).toBe(true);
    // With the broker itself gone too, nothing says the plugin is the cause.
    const gone = makeAdapter({ endpoint: `amqp://127.0.0.1:${deadPorts.amqp}`, options: { managementUrl: `http://127.0.0.1:${deadPorts.management}` } });
    const e2 = await expectMeshError(gone.observe({ grant: freshGrant() }), ErrorCodes.ProviderUnreachable);
    expect(e2.message).not.toContain("rabbitmq-plugins enable");
  });

  it("an admin without the administrator tag is ProviderMisconfigured, saying which tag it needs", async () => {
    const name = `mesh_test_monitor_${randomBytes(4).toString("hex")}`;
    await api("PUT", `/users/${name}`, { password: "monitor-pass", tags: ["monitoring"] });
    try {
      const weak = makeAdapter({ admin: { username: name, password: "monitor-pass" } });
      const e = await expectMeshError(weak.create({ grant: freshGrant(), secret: weak.generate() }), ErrorCodes.ProviderMisconfigured);
      expect(e.message).toMatch(/administrator/);
      expect(e.message).not.toContain("monitor-pass");
    } finally {
      await api("DELETE", `/users/${name}`);
    }
  });
});
