/**
 * The nats.user adapter against a nats-server of its own (Debian's 2.9.10) whose operator is
 * the mesh: full account resolver, system account, users issued as JWTs (test/harness/
 * nats-operator.ts, made by the same code as meshctl bootstrap). Never the shared server on 4222.
 */
import { randomBytes } from "node:crypto";
import { readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from "vitest";
import { connect, credsAuthenticator, type NatsConnection, type Status } from "@nats-io/transport-node";
import { AckPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { ErrorCodes, IDENTITY_RECORDS_LIMITS, isMeshError, parseMasterKey, type RequirementOptions } from "@mesh/shared";
import {
  NATS_IDENTITY_RECORDS_BUCKET,
  accountClaims,
  createOperatorSetup,
  newUserSeed,
  openSigningKeys,
  sealSigningKeys,
  withRevocations,
  type BindingValues,
  type ProviderAdapter,
  type ProviderConfig,
} from "@mesh/providers";
import { createNatsUserAdapter } from "../../packages/providers/src/nats-user.js";
import { startOperatorNats, type OperatorNats } from "../harness/nats-operator.js";
import { freePort } from "../harness/ports.js";
import { waitFor } from "../harness/wait.js";
import { scratchDir } from "../harness/scratch.js";
import { INJECTION_NAME, atPort, describeProviderConformance, expectMeshError, freshGrant } from "./provider-conformance.js";

let nats: OperatorNats;
let deadPort: number;

beforeAll(async () => {
  nats = await startOperatorNats();
  deadPort = await freePort();
});
afterAll(async () => {
  await nats?.stop();
});

const providerOf = (over: Partial<ProviderConfig> = {}): ProviderConfig => nats.provider(over);

/** The creds of `bindings` with the seed of another key: the JWT no longer matches the signature. */
const withForeignSeed = (b: BindingValues): BindingValues => ({ ...b, creds: b.creds!.replace(/SU[A-Z2-7]{56}/, newUserSeed()) });

describeProviderConformance("nats.user", () => createNatsUserAdapter(providerOf()), {
  stateful: true,
  wrongCredential: withForeignSeed,
  unreachable: {
    makeAdapter: () => createNatsUserAdapter(providerOf({ endpoint: `nats://127.0.0.1:${deadPort}` })),
    bindings: (b) => atPort(b, deadPort),
  },
});

/** Connects as the holder of `bindings` would (no reconnect), recording status events. */
async function asHolder(bindings: BindingValues): Promise<{ nc: NatsConnection; events: Status[] }> {
  const nc = await connect({
    servers: `${bindings.host}:${bindings.port}`,
    authenticator: credsAuthenticator(new TextEncoder().encode(bindings.creds!)),
    // Its replies come under its own prefix: the only inbox its identity may subscribe to.
    ...(bindings.inboxPrefix ? { inboxPrefix: bindings.inboxPrefix } : {}),
    reconnect: false,
    timeout: 3_000,
  });
  const events: Status[] = [];
  void (async () => {
    for await (const s of nc.status()) events.push(s);
  })();
  return { nc, events };
}

/**
 * A publish every identity here is refused: the server answers each operation of a connection
 * in order, so once its refusal is seen, any refusal of what was sent before it has been too.
 */
const SENTINEL = "$SYS.REQ.mesh.sentinel";
const sentinelRefused = (events: Status[], from: number) => events.slice(from).some((s) => s.type === "error" && String(s.error).includes(SENTINEL));

/** Publishes to `subject` and says whether the server refused it (a permissions violation, the connection stays open). */
async function publishRefused(h: { nc: NatsConnection; events: Status[] }, subject: string): Promise<boolean> {
  const before = h.events.length;
  h.nc.publish(subject, "x");
  h.nc.publish(SENTINEL, "x");
  await waitFor(`the server's refusal of ${SENTINEL}`, () => sentinelRefused(h.events, before) || undefined, 10_000, 5);
  return h.events.slice(before).some((s) => s.type === "error" && String(s.error).includes(`Permissions Violation for Publish to "${subject}"`));
}

/** Subscribes to `subject` and says whether the server refused it. */
async function subscribeRefused(h: { nc: NatsConnection; events: Status[] }, subject: string): Promise<boolean> {
  const before = h.events.length;
  let closed: unknown = "open";
  const sub = h.nc.subscribe(subject);
  void sub.closed.then((v) => (closed = v));
  h.nc.publish(SENTINEL, "x");
  await waitFor(`the server's refusal of ${SENTINEL}`, () => sentinelRefused(h.events, before) || undefined, 10_000, 5);
  // The subscription's refusal came first and closed it (a microtask behind its -ERR).
  await new Promise((r) => setImmediate(r));
  sub.unsubscribe();
  return closed instanceof Error && /Permissions Violation for Subscription/.test(closed.message);
}

/** The server's monitoring `/varz`: when it last loaded its configuration, and its process. */
async function varz(): Promise<{ config_load_time: string; start: string }> {
  const v = (await (await fetch(`http://127.0.0.1:${nats.server.monitorPort}/varz`)).json()) as { config_load_time: string; start: string };
  return { config_load_time: v.config_load_time, start: v.start };
}

/** The account JWT as the server has it now. */
async function serverAccount(): Promise<ReturnType<typeof accountClaims> & { size: number }> {
  const sysCreds = openSigningKeys(nats.masterKey, readFileSync(nats.files.signingKeysFile, "utf8")).systemUserCreds;
  const sys = await nats.connect(sysCreds);
  try {
    const jwt = (await sys.request(`$SYS.REQ.ACCOUNT.${nats.operator.account}.CLAIMS.LOOKUP`, "", { timeout: 2_000 })).string();
    return { ...accountClaims(jwt), size: jwt.length };
  } finally {
    await sys.close();
  }
}

/** How many identity records the adapter keeps on the server. */
async function recordCount(): Promise<number> {
  const nc = await nats.connect();
  try {
    const kv = await new Kvm(nc).open(NATS_IDENTITY_RECORDS_BUCKET);
    let n = 0;
    try {
      for await (const _ of await kv.keys()) n++;
    } catch (e) {
      // The bucket is made with the adapter's first record: none yet is none recorded.
      if (e instanceof Error && /stream not found/i.test(e.message)) return 0;
      throw e;
    }
    return n;
  } finally {
    await nc.close();
  }
}

describe("nats.user adapter (operator mode)", () => {
  let adapter: ProviderAdapter;
  beforeAll(() => {
    adapter = createNatsUserAdapter(providerOf());
  });
  afterAll(async () => {
    await adapter?.close();
  });

  const create = (grant = freshGrant(), options?: RequirementOptions) => adapter.create({ grant, secret: adapter.generate(), ...(options ? { options } : {}) });

  it("binds a standard .creds file whose JWT the account's signing key signed, a fresh key per generation, and changes nothing on the server", async () => {
    const before = await varz();
    const resolverFiles = readdirSync(nats.files.resolverDir).sort();
    const grant = freshGrant();
    const secret = adapter.generate();
    expect(Object.keys(secret)).toEqual(["seed"]);
    expect(secret.seed).toMatch(/^SU[A-Z2-7]{56}$/);
    const { resource, bindings } = await adapter.create({ grant, secret });
    const user = `${grant.module}_${grant.requirement}_1`;
    const inboxPrefix = `_GRANT_INBOX.${grant.module}.${grant.requirement}`;
    expect(resource).toEqual({ user, publish: `app.${grant.module}.>`, subscribe: `app.${grant.module}.>,${inboxPrefix}.>` });
    expect(bindings).toMatchObject({
      type: "nats",
      provider: "nats-test",
      host: "127.0.0.1",
      port: String(nats.server.port),
      uri: `nats://127.0.0.1:${nats.server.port}`,
      username: user,
      inboxPrefix,
    });
    expect(bindings.creds).toMatch(/^-----BEGIN NATS USER JWT-----\n.+\n------END NATS USER JWT------\n[\s\S]+-----BEGIN USER NKEY SEED-----\nSU/);
    expect(bindings.creds).toContain(secret.seed);
    for (const v of Object.values(resource)) expect(v).not.toContain(secret.seed);
    const jwt = bindings.creds!.split("\n")[1]!;
    const claims = JSON.parse(Buffer.from(jwt.split(".")[1]!, "base64url").toString()) as {
      sub: string;
      iss: string;
      exp: number;
      nats: { issuer_account: string; resp?: unknown; sub: { deny?: string[] }; pub: { deny?: string[] } };
    };
    // No other identity's inbox, no publishing into one, no answering requests.
    expect(claims.nats.sub.deny).toEqual(["_INBOX.>", "_MESH_INBOX.>"]);
    expect(claims.nats.pub.deny).toEqual(["_INBOX.>", "_MESH_INBOX.>", "_GRANT_INBOX.>"]);
    expect(claims.nats.resp).toBeUndefined();
    expect(claims.sub).toBe(bindings.nkey);
    expect(claims.nats.issuer_account).toBe(nats.operator.account);
    expect(claims.iss).not.toBe(nats.operator.account); // the signing key, not the account's identity key
    expect(claims.exp * 1000).toBeGreaterThan(Date.now() + 80 * 24 * 3600_000);
    const g2 = await adapter.create({ grant: { ...grant, generation: 2 }, secret: adapter.generate() });
    expect(g2.bindings.nkey).not.toBe(bindings.nkey);
    expect(await varz()).toEqual(before);
    expect(readdirSync(nats.files.resolverDir).sort()).toEqual(resolverFiles);
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
    expect(await publishRefused(h, "$JS.API.STREAM.DELETE.KV_mesh-credentials")).toBe(true);
    expect(await subscribeRefused(h, "app.other-module.>")).toBe(true);
    expect(await subscribeRefused(h, ">")).toBe(true);
    expect(h.nc.isClosed()).toBe(false); // a violation is reported, not fatal
    await h.nc.close();
    await adapter.delete({ grant });
  });

  it("request/reply works: the requester gets its reply under its own inbox prefix, a responder that asked for allowResponses may answer even with nothing to publish, one that did not may not", async () => {
    const answering = createNatsUserAdapter(providerOf({ options: { signingKeysFile: nats.files.signingKeysFile, allowResponses: "*" } }));
    onTestFinished(() => answering.close());
    const grant = freshGrant();
    const asked = (await answering.create({ grant, secret: answering.generate() })).bindings;
    const requester = await asHolder(asked);
    const responderGrant = { ...grant, requirement: "responder" };
    const responder = await asHolder(
      (await answering.create({ grant: responderGrant, secret: answering.generate(), options: { publish: [], allowResponses: true } })).bindings,
    );
    const silentGrant = { ...grant, requirement: "silent" };
    const silent = await asHolder((await answering.create({ grant: silentGrant, secret: answering.generate(), options: { publish: [] } })).bindings);
    const svc = `app.${grant.module}.svc`;
    for (const [h, answer] of [
      [responder, "pong"],
      [silent, "silent"],
    ] as const) {
      h.nc.subscribe(svc, { queue: answer, callback: (_, m) => void m.respond(`${answer} ${m.string()}`) });
      await h.nc.flush();
    }
    expect((await requester.nc.request(svc, "ping", { timeout: 2_000 })).string()).toBe("pong ping");
    expect(await publishRefused(responder, svc)).toBe(true); // only the reply was allowed
    // The silent one heard the request too; its answer was refused by the server.
    expect(await publishRefused(silent, `${asked.inboxPrefix}.x`)).toBe(true);
    // Asking for it where the provider's ceiling does not allow it: refused before anything is issued.
    const e = await expectMeshError(
      adapter.create({ grant: { ...grant, requirement: "asks" }, secret: adapter.generate(), options: { allowResponses: true } }),
      ErrorCodes.InvalidRequest,
    );
    expect(e.message).toMatch(/answer the requests it receives \(allowResponses\).*options\.allowResponses/);
    for (const h of [requester, responder, silent]) await h.nc.close();
    for (const g of [grant, responderGrant, silentGrant]) await answering.delete({ grant: g });
  });

  it("applies explicit options.publish and options.subscribe within a widened ceiling, and a changed option on the next create (a new JWT for the same key)", async () => {
    const grant = freshGrant();
    const wide = createNatsUserAdapter(
      providerOf({
        options: { signingKeysFile: nats.files.signingKeysFile, allowPublish: ["app.{module}.>", "orders.>"], allowSubscribe: ["app.{module}.>", "orders.>"] },
      }),
    );
    onTestFinished(() => wide.close());
    const secret = wide.generate();
    const { resource, bindings } = await wide.create({ grant, secret, options: { publish: ["orders.created"], subscribe: ["orders.*"] } });
    expect(resource).toMatchObject({ publish: "orders.created", subscribe: `orders.*,_GRANT_INBOX.${grant.module}.${grant.requirement}.>` });
    let h = await asHolder(bindings);
    expect(await publishRefused(h, "orders.created")).toBe(false);
    expect(await publishRefused(h, "orders.cancelled")).toBe(true);
    expect(await publishRefused(h, `app.${grant.module}.x`)).toBe(true);
    expect(await subscribeRefused(h, "orders.created")).toBe(false);
    expect(await subscribeRefused(h, "orders.created.eu")).toBe(true);
    await h.nc.close();

    const again = await wide.create({ grant, secret, options: { publish: "orders.>" } });
    expect(again.resource).toMatchObject({ publish: "orders.>", subscribe: `app.${grant.module}.>,_GRANT_INBOX.${grant.module}.${grant.requirement}.>` });
    expect(again.bindings.nkey).toBe(bindings.nkey);
    expect(again.bindings.creds).not.toBe(bindings.creds);
    h = await asHolder(again.bindings);
    expect(await publishRefused(h, "orders.cancelled")).toBe(false);
    await h.nc.close();
    await wide.delete({ grant });
  });

  it("refuses a requirement past the provider's ceiling (by default the module's own namespace) before anything is issued or recorded", async () => {
    const records = await recordCount();
    const grant = freshGrant();
    const past: RequirementOptions[] = [
      { publish: ">" },
      { publish: ["$JS.API.>"] },
      { subscribe: "$SYS.>" },
      { publish: ["mesh.>"] },
      { subscribe: ["app.other-module.>"] },
      { publish: `app.${grant.module}.*.>`, subscribe: "app.>" },
    ];
    for (const options of past) {
      const e = await expectMeshError(adapter.create({ grant, secret: adapter.generate(), options }), ErrorCodes.InvalidRequest);
      expect(e.message).toMatch(
        new RegExp(
          `^nats\\.user ${grant.module}/res asks to (publish|subscribe) ".*, past the ceiling of provider nats-test, which lets module ${grant.module} `,
        ),
      );
      expect(e.message).toMatch(/Ask the operator to widen the provider's options\.allow(Publish|Subscribe)/);
    }
    // Whatever the ceiling: no subscription that reaches another identity's inbox.
    for (const subscribe of [">", "_INBOX.>", "*.*.*.*"]) {
      const e = await expectMeshError(adapter.create({ grant, secret: adapter.generate(), options: { subscribe } }), ErrorCodes.InvalidRequest);
      expect(e.message).toMatch(/^requirement option subscribe: subscribe ".*" is refused: it reaches/);
    }
    expect(await recordCount()).toBe(records);
    expect((await adapter.observe({ grant })).exists).toBe(false);
    // A misconfigured ceiling is the provider's fault, and nothing is issued either.
    const bad = createNatsUserAdapter(providerOf({ options: { signingKeysFile: nats.files.signingKeysFile, allowPublish: ["orders..x"] } }));
    onTestFinished(() => bad.close());
    expect((await expectMeshError(bad.create({ grant, secret: bad.generate() }), ErrorCodes.ProviderMisconfigured)).message).toMatch(
      /options\.allowPublish entry "orders\.\.x"/,
    );
    expect(await recordCount()).toBe(records);
  });

  it("issues what a widened ceiling allows, and the server enforces the requirement's permissions, not the ceiling's", async () => {
    const grant = freshGrant();
    const m = grant.module;
    const wide = createNatsUserAdapter(
      providerOf({
        options: { signingKeysFile: nats.files.signingKeysFile, allowPublish: [`${m}:>`], allowSubscribe: ["app.{module}.>", "events.{module}.>"] },
      }),
    );
    onTestFinished(() => wide.close());
    const { resource, bindings } = await wide.create({ grant, secret: wide.generate(), options: { publish: "orders.>", subscribe: [`events.${m}.*`] } });
    expect(resource).toMatchObject({ publish: "orders.>", subscribe: `events.${m}.*,_GRANT_INBOX.${m}.${grant.requirement}.>` });
    const h = await asHolder(bindings);
    expect(await publishRefused(h, "orders.eu.created")).toBe(false);
    expect(await publishRefused(h, `app.${m}.x`)).toBe(true); // within the ceiling, but not asked for
    expect(await publishRefused(h, "$JS.API.STREAM.LIST")).toBe(true);
    expect(await subscribeRefused(h, `events.${m}.created`)).toBe(false);
    expect(await subscribeRefused(h, `app.${m}.>`)).toBe(true);
    expect(await subscribeRefused(h, ">")).toBe(true);
    // Why a subscribe permission ending in * is checked as if it ended in >: the server lets
    // this one subscribe to events.<m>.> (still within this ceiling).
    expect(await subscribeRefused(h, `events.${m}.>`)).toBe(false);
    await h.nc.close();
    // Under a ceiling ending in * there, the same request is refused for that reason.
    const narrow = createNatsUserAdapter(
      providerOf({ options: { signingKeysFile: nats.files.signingKeysFile, allowSubscribe: ["app.{module}.>", "events.{module}.*"] } }),
    );
    onTestFinished(() => narrow.close());
    const e = await expectMeshError(
      narrow.create({ grant: { ...grant, requirement: "narrow" }, secret: narrow.generate(), options: { subscribe: `events.${m}.*` } }),
      ErrorCodes.InvalidRequest,
    );
    expect(e.message).toMatch(/nats-server lets a subscription end in > where a permission ends in \*/);
    // The entry scoped to this module widens nothing for another one, on the same provider.
    await expectMeshError(wide.create({ grant: freshGrant(), secret: wide.generate(), options: { publish: "orders.>" } }), ErrorCodes.InvalidRequest);
    await wide.delete({ grant });
  });

  it("keeps its records in a bucket with the mesh's limits for it", async () => {
    await create(freshGrant());
    const nc = await nats.connect();
    try {
      const c = (await (await jetstreamManager(nc)).streams.info(`KV_${NATS_IDENTITY_RECORDS_BUCKET}`)).config;
      expect({ max_bytes: c.max_bytes, max_msg_size: c.max_msg_size, discard: c.discard }).toEqual({
        max_bytes: IDENTITY_RECORDS_LIMITS.maxBytes,
        max_msg_size: IDENTITY_RECORDS_LIMITS.maxValueSize,
        discard: "new",
      });
    } finally {
      await nc.close();
    }
  });

  it("refuses a hostile subject, option or name before anything is recorded", async () => {
    const records = await recordCount();
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
    await expectMeshError(adapter.create({ grant, secret: { seed: "SAnotauserseed" } }), ErrorCodes.InvalidRequest);
    await expectMeshError(adapter.create({ grant, secret: { password: "a-users-file-password" } }), ErrorCodes.InvalidRequest);
    expect(await recordCount()).toBe(records);
  });

  it("loses no revocation when 20 grants are created, then deleted, at once by 4 provisioners", async () => {
    const adapters = Array.from({ length: 4 }, () => createNatsUserAdapter(providerOf()));
    try {
      const grants = Array.from({ length: 20 }, () => freshGrant());
      const made = await Promise.all(
        grants.map((grant, i) => adapters[i % 4]!.create({ grant, secret: adapter.generate(), options: { publish: [`app.${grant.module}.n${i}`] } })),
      );
      for (const { bindings } of made) expect(await adapter.login({ bindings })).toEqual({ ok: true });
      for (const grant of grants) expect((await adapter.observe({ grant })).exists).toBe(true);
      await Promise.all(grants.map((grant, i) => adapters[i % 4]!.delete({ grant })));
      const revoked = (await serverAccount()).revocations;
      for (const { bindings } of made) {
        expect(revoked[bindings.nkey!], bindings.username).toBeGreaterThan(0);
        expect(await adapter.login({ bindings })).toMatchObject({ ok: false, reason: "rejected" });
      }
    } finally {
      await Promise.all(adapters.map((a) => a.close()));
    }
  });

  it("pushes a revocation again while the server stores it but does not enforce it", async () => {
    // What two writers' claims updates leave when the server applies them in the other order than
    // it stored them (see pushRevocations): its store revokes the key, the account in memory,
    // which decides logins, does not. Made here by writing the store's file of the account, which
    // the server reads for a lookup and not for a login.
    const grant = freshGrant();
    const { bindings } = await create(grant);
    const keys = openSigningKeys(nats.masterKey, readFileSync(nats.files.signingKeysFile, "utf8"));
    const file = join(nats.files.resolverDir, `${nats.operator.account}.jwt`);
    const stored = readFileSync(file, "utf8");
    const revocations = { ...accountClaims(stored).revocations, [bindings.nkey!]: Math.floor(Date.now() / 1000) + 3600 };
    writeFileSync(file, await withRevocations(stored, keys.operatorSigningSeed, revocations));
    expect((await serverAccount()).revocations[bindings.nkey!]).toBeGreaterThan(0);
    expect(await adapter.login({ bindings })).toEqual({ ok: true });
    await adapter.retire({ grant });
    expect(await adapter.login({ bindings })).toMatchObject({ ok: false, reason: "rejected" });
    await adapter.delete({ grant });
  });

  it("issuing and retiring reload nothing and disturb no other client: the admin, a JetStream consumer and another user's subscription", async () => {
    const before = await varz();
    const nc = await nats.connect();
    const adminEvents: Status[] = [];
    void (async () => {
      for await (const s of nc.status()) adminEvents.push(s);
    })();
    const stream = `T${randomBytes(4).toString("hex")}`;
    const js = jetstream(nc);
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add({ name: stream, subjects: [`${stream}.>`] });
    await jsm.consumers.add(stream, { durable_name: "d", ack_policy: AckPolicy.Explicit });
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
      // No gap to ride out: the API answers straight after every change.
      await jsm.streams.info(stream);
      if (round > 1) await adapter.retire({ grant: { ...grant, generation: round - 1 } });
      await js.publish(`${stream}.x`, `${round}`);
      bystander.nc.publish(`app.${bystanderGrant.module}.tick`, "t");
      await bystander.nc.flush();
    }
    await waitFor("the consumer and the subscriber to get every message", () => consumed === 3 && heard === 3, 5_000);
    expect(nc.isClosed()).toBe(false);
    expect(bystander.nc.isClosed()).toBe(false);
    expect(adminEvents.filter((s) => s.type !== "ping")).toEqual([]);
    expect(bystander.events.filter((s) => s.type !== "ping")).toEqual([]);
    expect(await varz()).toEqual(before); // the same process, its configuration never loaded again
    await messages.close();
    await jsm.streams.delete(stream);
    await nc.close();
    await bystander.nc.close();
    await adapter.delete({ grant });
    await adapter.delete({ grant: bystanderGrant });
  });

  it("retiring generation 1 closes its open connection at once (User Authentication Revoked) and leaves generation 2's open", async () => {
    const grant = freshGrant(1);
    const secret = adapter.generate();
    const g1 = await asHolder((await adapter.create({ grant, secret })).bindings);
    const g2 = await asHolder((await create({ ...grant, generation: 2 })).bindings);
    const closed = g1.nc.closed();
    await adapter.retire({ grant });
    const why = await Promise.race([closed, new Promise((r) => setTimeout(() => r("still open"), 2_000))]);
    expect(String(why)).toMatch(/Authentication Revoked/);
    expect(g2.nc.isClosed()).toBe(false);
    expect(await publishRefused(g2, `app.${grant.module}.x`)).toBe(false);
    await g2.nc.close();
    // Retired for good: it is not issued again.
    expect((await expectMeshError(adapter.create({ grant, secret }), ErrorCodes.Conflict)).message).toMatch(/was revoked at .*; rotate/);
    expect((await expectMeshError(adapter.create({ grant, secret: adapter.generate() }), ErrorCodes.Conflict)).message).toMatch(/issued to another key/);
    await adapter.retire({ grant }); // idempotent
    await adapter.delete({ grant });
  });

  it("delete and retire leave a user of another grant alone", async () => {
    const mine = freshGrant();
    const other = freshGrant();
    const a = await create(mine);
    const b = await create(other);
    await adapter.delete({ grant: other });
    await adapter.retire({ grant: { ...other, generation: 1 } });
    expect(await adapter.login({ bindings: a.bindings })).toEqual({ ok: true });
    expect(await adapter.login({ bindings: b.bindings })).toMatchObject({ ok: false, reason: "rejected" });
    expect((await adapter.observe({ grant: other })).exists).toBe(false);
    await adapter.delete({ grant: mine });
  });

  it("prunes revocations of keys whose JWT has expired, so the account JWT stays small however many rotations there were", async () => {
    // A revocation goes once its key's JWT has expired and the skew allowed (as long as the
    // expiry) has passed too. The expiry is long enough that the first key's revocation is
    // still there when the thirtieth is retired on a loaded machine, and the wait is for the
    // last key's expiry as the provider set it, not a guess.
    const expiryS = 6;
    const short = createNatsUserAdapter(providerOf({ options: { signingKeysFile: nats.files.signingKeysFile, userExpiry: `${expiryS}s` } }));
    try {
      const grant = freshGrant(1);
      const keys: string[] = [];
      let lastExpiry = 0;
      for (let g = 1; g <= 30; g++) {
        const created = await short.create({ grant: { ...grant, generation: g }, secret: short.generate() });
        keys.push(created.bindings.nkey!);
        lastExpiry = Date.parse(created.expiresAt!);
        if (g > 1) await short.retire({ grant: { ...grant, generation: g - 1 } });
      }
      const grown = await serverAccount();
      expect(keys.slice(0, 29).filter((k) => k in grown.revocations)).toHaveLength(29);
      // Past every key's expiry and the skew allowed, in whole seconds.
      await new Promise((r) => setTimeout(r, Math.max(0, lastExpiry + expiryS * 1000 + 1_500 - Date.now())));
      const g31 = (await short.create({ grant: { ...grant, generation: 31 }, secret: short.generate() })).bindings.nkey!;
      await short.create({ grant: { ...grant, generation: 32 }, secret: short.generate() });
      await short.retire({ grant: { ...grant, generation: 31 } });
      const pruned = await serverAccount();
      expect(keys.filter((k) => k in pruned.revocations)).toEqual([]);
      expect(pruned.revocations[g31]).toBeGreaterThan(0);
      expect(pruned.size).toBeLessThan(grown.size - 29 * 60);
      await short.delete({ grant });
    } finally {
      await short.close();
    }
  }, 90_000);

  it("a wrong admin, or signing keys of another operator, is ProviderMisconfigured, naming what to check; nothing is recorded", async () => {
    const records = await recordCount();
    const other = await createOperatorSetup();
    const dir = scratchDir("mesh-keys-");
    const foreignKeys = join(dir, "signing-keys.json");
    writeFileSync(foreignKeys, sealSigningKeys(nats.masterKey, { ...other.signing }));
    const cases: [Partial<ProviderConfig>, RegExp][] = [
      [{ admin: { username: "mesh-admin", password: other.adminCreds } }, /rejected the admin.*passwordFile/],
      [{ options: { signingKeysFile: foreignKeys } }, /rejected the system account's user|does not know account/],
      [{ masterKey: parseMasterKey(randomBytes(32).toString("hex")) }, /cannot open options\.signingKeysFile/],
      [{ options: {} }, /options\.signingKeysFile is missing/],
      [{ options: { signingKeysFile: "signing-keys.json" } }, /is not an absolute path/],
    ];
    for (const [over, message] of cases) {
      const a = createNatsUserAdapter(providerOf(over));
      try {
        const e = await expectMeshError(a.create({ grant: freshGrant(), secret: a.generate() }), ErrorCodes.ProviderMisconfigured);
        expect(e.message).toMatch(message);
        expect(e.message).not.toMatch(/SU[A-Z2-7]{56}|SA[A-Z2-7]{56}|SO[A-Z2-7]{56}/);
        expect(isMeshError(e) && e.retryable).toBe(false);
      } finally {
        await a.close();
      }
    }
    expect(await recordCount()).toBe(records);
  });

  it("a stopped server is unreachable; once it is back, the same credential logs in again and its revocations hold", async () => {
    const grant = freshGrant();
    const { bindings } = await create(grant);
    const retired = await create({ ...grant, requirement: "gone" });
    await adapter.retire({ grant: { ...grant, requirement: "gone" } });
    await nats.server.stop({ keepStore: true });
    try {
      expect(await adapter.login({ bindings })).toMatchObject({ ok: false, reason: "unreachable" });
      const e = await expectMeshError(adapter.observe({ grant }), ErrorCodes.ProviderUnreachable);
      expect(e.message).toContain(nats.url);
    } finally {
      await nats.server.restart();
    }
    await waitFor("the server to accept the identity again", async () => (await adapter.login({ bindings })).ok);
    expect(await adapter.login({ bindings: retired.bindings })).toMatchObject({ ok: false, reason: "rejected" });
    expect((await adapter.observe({ grant })).exists).toBe(true);
    await adapter.delete({ grant });
  });
});
