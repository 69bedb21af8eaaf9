/**
 * The nats.user adapter against a nats-server of its own (Debian's 2.9.10), started with a
 * config that includes the adapter's users file and writes a pid file, as deploy/nats/auth.conf
 * does. Never the shared server on 4222.
 */
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, type NatsConnection, type Status } from "@nats-io/transport-node";
import { AckPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
import { ErrorCodes, isMeshError, type RequirementOptions } from "@mesh/shared";
import type { BindingValues, ProviderAdapter, ProviderConfig } from "@mesh/providers";
import { createNatsUserAdapter } from "../../packages/providers/src/nats-user.js";
import { initNatsUsersFile } from "../../packages/providers/src/nats-users-file.js";
import { startNatsServer, type NatsServer } from "../harness/nats-server.js";
import { freePort } from "../harness/ports.js";
import { waitFor } from "../harness/wait.js";
import { INJECTION_NAME, describeProviderConformance, expectMeshError, freshGrant } from "./provider-conformance.js";

let server: NatsServer;
let dir: string;
let usersFile: string;
let pidFile: string;
let deadPort: number;
const admin = { username: "mesh-admin", password: `admin-${randomBytes(12).toString("hex")}` };

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "mesh-nats-user-"));
  mkdirSync(join(dir, "users"));
  usersFile = join(dir, "users", "mesh-users.conf");
  pidFile = join(dir, "nats.pid");
  const storeDir = join(dir, "jetstream");
  // JetStream in the file, not by flag: a reload would turn off what only -js enabled.
  writeFileSync(
    join(dir, "nats.conf"),
    `pid_file: ${JSON.stringify(pidFile)}\njetstream { store_dir: ${JSON.stringify(storeDir)} }\ninclude ./users/mesh-users.conf\n`,
  );
  // The server's config includes the users file, so it must exist before the server starts.
  await initNatsUsersFile(usersFile, admin);
  server = await startNatsServer({ configFile: join(dir, "nats.conf"), storeDir });
  await waitFor("the pid file", () => readFileSync(pidFile, "utf8").trim() === String(server.pid));
  deadPort = await freePort();
});
afterAll(async () => {
  await server?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const providerOf = (over: Partial<ProviderConfig> = {}): ProviderConfig => ({
  name: "nats-test",
  node: "node-a",
  endpoint: server.url,
  admin,
  options: { usersFile, pidFile },
  ...over,
});

describeProviderConformance("nats.user", () => createNatsUserAdapter(providerOf()), {
  stateful: true,
  wrongCredential: (b) => ({ ...b, password: `${b.password}x` }),
  unreachable: {
    makeAdapter: () => createNatsUserAdapter(providerOf({ endpoint: `nats://127.0.0.1:${deadPort}`, options: { usersFile: join(dir, "dead.conf"), pidFile: join(dir, "dead.pid") } })),
    bindings: (b) => ({ ...b, port: String(deadPort) }),
  },
});

/** Connects as the holder of `bindings` would (no reconnect), recording status events. */
async function asHolder(bindings: BindingValues): Promise<{ nc: NatsConnection; events: Status[] }> {
  const nc = await connect({ servers: `${bindings.host}:${bindings.port}`, user: bindings.username, pass: bindings.password, reconnect: false, timeout: 3_000 });
  const events: Status[] = [];
  void (async () => {
    for await (const s of nc.status()) events.push(s);
  })();
  return { nc, events };
}

const asAdmin = () => connect({ servers: server.url, user: admin.username, pass: admin.password, reconnect: false, timeout: 3_000 });

/** Publishes to `subject` and says whether the server refused it (a permissions violation, the connection stays open). */
async function publishRefused(h: { nc: NatsConnection; events: Status[] }, subject: string): Promise<boolean> {
  const before = h.events.length;
  h.nc.publish(subject, "x");
  await h.nc.flush();
  await new Promise((r) => setTimeout(r, 50)); // the -ERR may follow the PONG
  return h.events.slice(before).some((s) => s.type === "error" && /Permissions Violation for Publish/.test(String(s.error)));
}

/** Subscribes to `subject` and says whether the server refused it. */
async function subscribeRefused(nc: NatsConnection, subject: string): Promise<boolean> {
  const sub = nc.subscribe(subject);
  await nc.flush();
  const closed = await Promise.race([sub.closed, new Promise((r) => setTimeout(() => r("open"), 200))]);
  sub.unsubscribe();
  return closed instanceof Error && /Permissions Violation for Subscription/.test(closed.message);
}

describe("nats.user adapter", () => {
  let adapter: ProviderAdapter;
  beforeAll(() => {
    adapter = createNatsUserAdapter(providerOf());
  });
  afterAll(async () => {
    await adapter?.close();
  });

  const create = (grant = freshGrant(), options?: RequirementOptions) => adapter.create({ grant, secret: adapter.generate(), ...(options ? { options } : {}) });

  it("binds what a holder needs, and keeps no password on disk", async () => {
    const grant = freshGrant();
    const secret = adapter.generate();
    const { resource, bindings } = await adapter.create({ grant, secret });
    const user = `${grant.module}_${grant.requirement}_a`;
    expect(resource).toEqual({ user, publish: `app.${grant.module}.>`, subscribe: `app.${grant.module}.>,_INBOX.>` });
    expect(bindings).toEqual({
      type: "nats",
      provider: "nats-test",
      host: "127.0.0.1",
      port: String(server.port),
      username: user,
      password: secret.password,
      uri: `nats://${user}:${secret.password}@127.0.0.1:${server.port}`,
    });
    const onDisk = [usersFile, ...readdirSync(`${usersFile}.d`).map((n) => join(`${usersFile}.d`, n))].map((f) => readFileSync(f, "utf8")).join("\n");
    expect(onDisk).toContain(user);
    expect(onDisk).not.toContain(secret.password);
    expect(onDisk).not.toContain(admin.password);
    const g2 = await adapter.create({ grant: { ...grant, generation: 2 }, secret: adapter.generate() });
    expect(g2.resource).toEqual({ ...resource, user: `${grant.module}_${grant.requirement}_b` });
    await adapter.delete({ grant });
  });

  it("with default permissions, a user publishes and subscribes in its module's namespace only", async () => {
    const grant = freshGrant();
    const { bindings } = await create(grant);
    const h = await asHolder(bindings);
    const ns = `app.${grant.module}`;
    const sub = h.nc.subscribe(`${ns}.orders`, { max: 1 });
    await h.nc.flush();
    expect(await publishRefused(h, `${ns}.orders`)).toBe(false);
    for await (const msg of sub) expect(msg.string()).toBe("x");
    expect(await publishRefused(h, "app.other-module.orders")).toBe(true);
    expect(await publishRefused(h, "mesh.api.apply")).toBe(true);
    expect(await subscribeRefused(h.nc, "app.other-module.>")).toBe(true);
    expect(await subscribeRefused(h.nc, ">")).toBe(true);
    expect(h.nc.isClosed()).toBe(false); // a violation is reported, not fatal
    await h.nc.close();
    await adapter.delete({ grant });
  });

  it("request/reply works: the requester gets its reply on _INBOX, a responder may answer even with nothing to publish", async () => {
    const grant = freshGrant();
    const requester = await asHolder((await create(grant)).bindings);
    const responderGrant = { ...grant, requirement: "responder" };
    const responder = await asHolder((await create(responderGrant, { publish: [] })).bindings);
    const svc = `app.${grant.module}.svc`;
    responder.nc.subscribe(svc, {
      callback: (_, m) => {
        m.respond(`pong ${m.string()}`);
      },
    });
    await responder.nc.flush();
    expect((await requester.nc.request(svc, "ping", { timeout: 2_000 })).string()).toBe("pong ping");
    expect(await publishRefused(responder, svc)).toBe(true); // only the reply was allowed
    await requester.nc.close();
    await responder.nc.close();
    await adapter.delete({ grant });
    await adapter.delete({ grant: responderGrant });
  });

  it("applies explicit options.publish and options.subscribe, and a changed option on the next create", async () => {
    const grant = freshGrant();
    const { resource, bindings } = await create(grant, { publish: ["orders.created"], subscribe: ["orders.*"] });
    expect(resource).toMatchObject({ publish: "orders.created", subscribe: "orders.*,_INBOX.>" });
    let h = await asHolder(bindings);
    expect(await publishRefused(h, "orders.created")).toBe(false);
    expect(await publishRefused(h, "orders.cancelled")).toBe(true);
    expect(await publishRefused(h, `app.${grant.module}.x`)).toBe(true);
    expect(await subscribeRefused(h.nc, "orders.created")).toBe(false);
    expect(await subscribeRefused(h.nc, "orders.created.eu")).toBe(true);
    await h.nc.close();

    const again = await adapter.create({ grant, secret: { password: bindings.password! }, options: { publish: "orders.>" } });
    expect(again.resource).toMatchObject({ publish: "orders.>", subscribe: `app.${grant.module}.>,_INBOX.>` });
    h = await asHolder(again.bindings);
    expect(await publishRefused(h, "orders.cancelled")).toBe(false);
    await h.nc.close();
    await adapter.delete({ grant });
  });

  it("refuses a hostile subject, option or name before anything is written: the users file is unchanged", async () => {
    const before = readFileSync(usersFile, "utf8");
    const records = readdirSync(`${usersFile}.d`).sort();
    const grant = freshGrant();
    const hostile: RequirementOptions[] = [
      { publish: ['x"]}, {user: "evil", password: "p"}, {"'] },
      { subscribe: ["a b"] },
      { subscribe: ["orders.>.x"] },
      { publish: "$(touch /tmp/x)" },
      { publish: ["ok\n}"] },
      { permissions: ">" },
    ];
    for (const options of hostile) {
      const e = await expectMeshError(adapter.create({ grant, secret: adapter.generate(), options }), ErrorCodes.InvalidRequest);
      expect(e.message).toMatch(/publish|subscribe|permissions/);
    }
    await expectMeshError(adapter.create({ grant: { ...grant, module: INJECTION_NAME }, secret: adapter.generate() }), ErrorCodes.InvalidName);
    expect(readFileSync(usersFile, "utf8")).toBe(before);
    expect(readdirSync(`${usersFile}.d`).sort()).toEqual(records);
  });

  it("loses no user when 20 grants are created at once by 4 provisioners", async () => {
    const adapters = Array.from({ length: 4 }, () => createNatsUserAdapter(providerOf()));
    try {
      const grants = Array.from({ length: 20 }, () => freshGrant());
      const made = await Promise.all(grants.map((grant, i) => adapters[i % 4]!.create({ grant, secret: adapter.generate(), options: { publish: [`app.${grant.module}.n${i}`] } })));
      for (const { bindings } of made) expect(await adapter.login({ bindings })).toEqual({ ok: true });
      for (const grant of grants) expect((await adapter.observe({ grant })).exists).toBe(true);
      await Promise.all(grants.map((grant, i) => adapters[i % 4]!.delete({ grant })));
      for (const { bindings } of made) expect(await adapter.login({ bindings })).toMatchObject({ ok: false, reason: "rejected" });
    } finally {
      await Promise.all(adapters.map((a) => a.close()));
    }
  });

  it("reloads disturb no other client: the admin, a JetStream consumer and another user's subscription keep working", async () => {
    const nc = await asAdmin();
    const adminEvents: Status[] = [];
    void (async () => {
      for await (const s of nc.status()) adminEvents.push(s);
    })();
    // The JetStream API (not the data path) answers "no responders" for ~100 ms after a reload,
    // as after the previous test's last change.
    const stream = `T${randomBytes(4).toString("hex")}`;
    const js = jetstream(nc);
    const jsm = await waitFor("the JetStream API", async () => {
      const m = await jetstreamManager(nc);
      await m.streams.add({ name: stream, subjects: [`${stream}.>`] });
      await m.consumers.add(stream, { durable_name: "d", ack_policy: AckPolicy.Explicit });
      return m;
    });
    const messages = await (await js.consumers.get(stream, "d")).consume();
    let consumed = 0;
    void (async () => {
      for await (const m of messages) {
        consumed++;
        m.ack();
      }
    })();
    const bystanderGrant = freshGrant();
    const bystander = await asHolder((await create(bystanderGrant)).bindings);
    let heard = 0;
    bystander.nc.subscribe(`app.${bystanderGrant.module}.tick`, {
      callback: () => {
        heard++;
      },
    });

    const grant = freshGrant();
    for (let round = 1; round <= 3; round++) {
      await create({ ...grant, generation: round });
      await adapter.retire({ grant: { ...grant, generation: round - 1 || 1 } });
      await js.publish(`${stream}.x`, `${round}`);
      bystander.nc.publish(`app.${bystanderGrant.module}.tick`, "t");
      await bystander.nc.flush();
    }
    await waitFor("the consumer and the subscriber to get every message", () => consumed === 3 && heard === 3, 5_000);
    expect(nc.isClosed()).toBe(false);
    expect(bystander.nc.isClosed()).toBe(false);
    expect(adminEvents.filter((s) => s.type !== "ping")).toEqual([]);
    expect(bystander.events.filter((s) => s.type !== "ping")).toEqual([]);
    await messages.close();
    await waitFor("the JetStream API after the last reload", () => jsm.streams.delete(stream), 5_000);
    await nc.close();
    await bystander.nc.close();
    await adapter.delete({ grant });
    await adapter.delete({ grant: bystanderGrant });
  });

  it("retiring generation 1 closes its open connection (nats-server 2.9.10) and leaves generation 2's open", async () => {
    const grant = freshGrant(1);
    const g1 = await asHolder((await create(grant)).bindings);
    const g2 = await asHolder((await create({ ...grant, generation: 2 })).bindings);
    const closed = g1.nc.closed();
    const started = Date.now();
    await adapter.retire({ grant });
    // The server ends the connection without an error to the client ("Client Closed" in its log).
    expect(await Promise.race([closed, new Promise((r) => setTimeout(() => r("still open"), 2_000))])).toBeUndefined();
    expect(Date.now() - started).toBeLessThan(2_000);
    expect(g1.events.map((s) => s.type)).toContain("disconnect");
    expect(g2.nc.isClosed()).toBe(false);
    expect(await publishRefused(g2, `app.${grant.module}.x`)).toBe(false);
    await g2.nc.close();
    await adapter.delete({ grant });
  });

  it("a late retire of generation 1 leaves the user alone that serves generation 3 by now", async () => {
    const grant = freshGrant(1);
    await create(grant);
    await create({ ...grant, generation: 2 });
    const g3 = await create({ ...grant, generation: 3 });
    await adapter.retire({ grant });
    expect(await adapter.login({ bindings: g3.bindings })).toEqual({ ok: true });
    await adapter.retire({ grant: { ...grant, generation: 3 } });
    expect(await adapter.login({ bindings: g3.bindings })).toMatchObject({ ok: false, reason: "rejected" });
    await adapter.delete({ grant });
  });

  it("a new password for the same user closes its open connection with an Authorization Violation", async () => {
    const grant = freshGrant();
    const h = await asHolder((await create(grant)).bindings);
    await create(grant);
    const e = await Promise.race([h.nc.closed(), new Promise((r) => setTimeout(() => r("still open"), 2_000))]);
    expect(String(e)).toMatch(/Authorization Violation/);
    await adapter.delete({ grant });
  });

  it("delete and retire leave a user of another grant alone, and create refuses the admin's name", async () => {
    const mine = freshGrant();
    const other = freshGrant();
    const a = await create(mine);
    const b = await create(other);
    await adapter.delete({ grant: other });
    await adapter.retire({ grant: { ...other, generation: 1 } });
    expect(await adapter.login({ bindings: a.bindings })).toEqual({ ok: true });
    expect(await adapter.login({ bindings: b.bindings })).toMatchObject({ ok: false, reason: "rejected" });
    await adapter.delete({ grant: mine });

    const clash = createNatsUserAdapter(providerOf({ admin: { username: "shop_db_a", password: admin.password } }));
    try {
      await expectMeshError(clash.create({ grant: { module: "shop", requirement: "db", generation: 1 }, secret: clash.generate() }), ErrorCodes.Conflict);
    } finally {
      await clash.close();
    }
  });

  it("a wrong admin password is ProviderMisconfigured, naming the user and where the password comes from", async () => {
    const wrong = createNatsUserAdapter(providerOf({ admin: { username: admin.username, password: "not-the-password" } }));
    try {
      const before = readFileSync(usersFile, "utf8");
      for (const call of [wrong.observe({ grant: freshGrant() }), wrong.create({ grant: freshGrant(), secret: wrong.generate() })]) {
        const e = await expectMeshError(call, ErrorCodes.ProviderMisconfigured);
        expect(e.message).toContain(`"${admin.username}"`);
        expect(e.message).toMatch(/passwordEnv|passwordFile/);
        expect(e.message).not.toContain("not-the-password");
        expect(isMeshError(e) && e.retryable).toBe(false);
      }
      expect(readFileSync(usersFile, "utf8")).toBe(before); // nothing written with a wrong admin
    } finally {
      await wrong.close();
    }
  });

  it("refuses a provider without usersFile, pidFile, admin password or nats:// endpoint, naming what is wrong", async () => {
    // A bad endpoint is refused at once; what only the admin verbs need is refused by them, so
    // an agent can still make a login-only adapter from the document without the admin's password.
    const atOnce: [Partial<ProviderConfig>, RegExp][] = [
      [{ endpoint: "postgres://127.0.0.1:5432" }, /not a nats:\/\/ URL/],
      [{ endpoint: "nats://u:secret-pass@127.0.0.1:4222" }, /holds a user or password/],
    ];
    const byAdminVerbs: [Partial<ProviderConfig>, RegExp][] = [
      [{ options: { pidFile } }, /options\.usersFile is missing/],
      [{ options: { usersFile } }, /options\.pidFile is missing/],
      [{ options: { usersFile: "users.conf", pidFile } }, /options\.usersFile "users\.conf" is not an absolute path/],
      [{ admin: { username: admin.username } }, /no password; give admin\.passwordEnv or admin\.passwordFile/],
      [{ admin: { username: 'a"b', password: "p" } }, /admin\.username/],
    ];
    const check = (e: unknown, message: RegExp) => {
      expect(isMeshError(e, ErrorCodes.ProviderMisconfigured), String(message)).toBe(true);
      expect((e as Error).message).toMatch(message);
      expect((e as Error).message).not.toContain("secret-pass");
    };
    for (const [over, message] of atOnce) check(await Promise.resolve().then(() => createNatsUserAdapter(providerOf(over))).catch((e: unknown) => e), message);
    for (const [over, message] of byAdminVerbs) {
      const a = createNatsUserAdapter(providerOf(over));
      const grant = freshGrant();
      for (const call of [() => a.create({ grant, secret: a.generate() }), () => a.observe({ grant }), () => a.delete({ grant }), () => a.retire({ grant })]) {
        check(await call().catch((e: unknown) => e), message);
      }
      await a.close();
    }
  });

  it("refuses to signal a process that is not nats-server, and never takes over a users file it did not write", async () => {
    const other = join(dir, "other");
    mkdirSync(other);
    const notNats = join(other, "node.pid");
    writeFileSync(notNats, String(process.pid)); // SIGHUP would end this test run
    const stale = createNatsUserAdapter(providerOf({ options: { usersFile: join(other, "users.conf"), pidFile: notNats } }));
    const foreign = 'authorization { users = [\n  {user: "ops", password: "x"}\n] }\n';
    writeFileSync(join(other, "foreign.conf"), foreign);
    const taken = createNatsUserAdapter(providerOf({ options: { usersFile: join(other, "foreign.conf"), pidFile } }));
    try {
      const e = await expectMeshError(stale.create({ grant: freshGrant(), secret: stale.generate() }), ErrorCodes.ProviderMisconfigured);
      expect(e.message).toMatch(/not nats-server; refusing to signal it/);
      await expectMeshError(taken.create({ grant: freshGrant(), secret: taken.generate() }), ErrorCodes.Conflict);
      expect(readFileSync(join(other, "foreign.conf"), "utf8")).toBe(foreign);
    } finally {
      await stale.close();
      await taken.close();
    }
  });

  it("a stopped server is unreachable; once it is back, the same credential logs in again", async () => {
    const grant = freshGrant();
    const { bindings } = await create(grant);
    await server.stop({ keepStore: true });
    try {
      expect(await adapter.login({ bindings })).toMatchObject({ ok: false, reason: "unreachable" });
      const e = await expectMeshError(adapter.observe({ grant }), ErrorCodes.ProviderUnreachable);
      expect(e.message).toContain(server.url);
      expect(e.message).not.toContain(admin.password);
    } finally {
      await server.restart();
    }
    expect(await adapter.login({ bindings })).toEqual({ ok: true });
    expect((await adapter.observe({ grant })).exists).toBe(true);
    await adapter.delete({ grant });
  });
});
