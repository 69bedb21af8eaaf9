/**
 * The mesh's KV buckets are bounded: a fresh store is made with limits.ts's BUCKET_LIMITS, a
 * store made before them is brought up to them when it is opened, losing nothing, and a write
 * to a full bucket is refused with a MeshError that names the bucket and what to do. Each test
 * on a nats-server of its own (Debian's 2.9.10), with small limits given as openStore's option.
 */
import { randomBytes } from "node:crypto";
import { describe, expect, it, onTestFinished } from "vitest";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { DiscardPolicy, jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import {
  BUCKET_LIMITS,
  Buckets,
  ErrorCodes,
  Grant,
  ModuleStatus,
  fillLimit,
  isMeshError,
  keys,
  kvStream,
  parseMasterKey,
  recordJson,
  storeWrite,
  storedSize,
} from "@mesh/shared";
import { entryJson, mutateJson, openStore, type OpenStoreOptions, type Store } from "@mesh/shared/runtime";
import { createLogger } from "@mesh/shared/service";
import { CredentialStore } from "@mesh/providers";
import { startNatsServer } from "./harness/nats-server.js";
import { LogCapture } from "./harness/log-capture.js";

/** A server and a connection of this test's own, stopped when it finishes. */
async function freshNats(): Promise<{ nc: NatsConnection; jsm: JetStreamManager }> {
  const server = await startNatsServer();
  const nc = await connect({ servers: server.url });
  onTestFinished(async () => {
    await nc.close();
    await server.stop();
  });
  return { nc, jsm: await jetstreamManager(nc) };
}

function logged(): { capture: LogCapture; log: NonNullable<OpenStoreOptions["log"]> } {
  const capture = new LogCapture();
  return { capture, log: createLogger("store", { destination: capture }) };
}

const grant = (requirement: string, pad = ""): Grant => ({
  id: `shop/${requirement}`,
  module: "shop",
  requirement,
  kind: "secret",
  parts: ["api"],
  targets: [{ part: "api", node: "node-a" }],
  provider: "builtin-secret",
  generation: 1,
  resource: { pad },
  holders: {},
  conditions: [],
});
const putGrant = (store: Store, g: Grant) => mutateJson(store.kv.grants, keys.grant(g.module, g.requirement), Grant, () => g);
const bytesOf = async (jsm: JetStreamManager, bucket: string) => (await jsm.streams.info(kvStream(bucket))).state;

/** The `max_bytes` of the tests at the limit: the mesh fills it to 80%, 6,553 bytes. */
const LIMIT = 8 * 1024;
/** The pad of grant r2 that makes its write `over` bytes past what the mesh lets into a bucket holding `held` bytes. */
const padTo = (held: number, over: number) => fillLimit(LIMIT) + over - held - storedSize(Buckets.grants, "shop.r2", recordJson(grant("r2")).length);

/** What `p` rejects with. */
const rejection = (p: Promise<unknown>) =>
  p.then(
    () => undefined,
    (e: unknown) => e,
  );

describe("the store's buckets", () => {
  it("are made with their limits: size, value size, discard new, the holders' age", async () => {
    const { nc, jsm } = await freshNats();
    await openStore(nc, { log: logged().log });
    for (const [name, bucket] of Object.entries(Buckets) as Array<[keyof typeof Buckets, string]>) {
      const c = (await jsm.streams.info(kvStream(bucket))).config;
      const l = BUCKET_LIMITS[name];
      expect({ bucket, max_bytes: c.max_bytes, max_msg_size: c.max_msg_size, discard: c.discard, history: c.max_msgs_per_subject }).toEqual({
        bucket,
        max_bytes: l.maxBytes,
        max_msg_size: l.maxValueSize,
        discard: DiscardPolicy.New,
        history: l.history,
      });
      expect(c.max_age).toBe((l.ttlMs ?? 0) * 1_000_000);
    }
  });

  it("take a write up to the limit", async () => {
    const { nc, jsm } = await freshNats();
    const store = await openStore(nc, { bucketLimits: { grants: { maxBytes: LIMIT } }, log: logged().log });
    await putGrant(store, grant("r1"));
    const held = await bytesOf(jsm, Buckets.grants);
    await putGrant(store, grant("r2", "x".repeat(padTo(held.bytes, 0))));
    expect(await bytesOf(jsm, Buckets.grants)).toMatchObject({ messages: 2 });
  });

  it("refuse one byte past it, with StoreFull naming the bucket, its size and what to do, and keep what they hold", async () => {
    const { nc, jsm } = await freshNats();
    const store = await openStore(nc, { bucketLimits: { grants: { maxBytes: LIMIT } }, log: logged().log });
    await putGrant(store, grant("r1"));
    const held = await bytesOf(jsm, Buckets.grants);
    const e = await rejection(putGrant(store, grant("r2", "x".repeat(padTo(held.bytes, 1)))));
    expect(isMeshError(e, ErrorCodes.StoreFull)).toBe(true);
    expect((e as Error).message).toMatch(
      new RegExp(
        `^the mesh's store bucket mesh-grants is full \\(it holds ${held.bytes} bytes; the mesh fills it to 6\\.4 KiB, 80% of its max_bytes 8 KiB\\), so key shop\\.r2 was not stored; it holds every requirement's grant.*nats stream edit KV_mesh-grants --max-bytes`,
      ),
    );
    expect((e as { retryable: boolean }).retryable).toBe(false);
    expect(await bytesOf(jsm, Buckets.grants)).toMatchObject({ bytes: held.bytes, messages: 1 });
    expect(entryJson((await store.kv.grants.get("shop.r1"))!)).toEqual(grant("r1"));
  });

  it("turn the server's own refusal of a full bucket (JetStream 10077, maximum bytes exceeded) into StoreFull too", async () => {
    const { nc, jsm } = await freshNats();
    const store = await openStore(nc, { bucketLimits: { holders: { maxBytes: 1024 } }, log: logged().log });
    const kv = store.kv.holders;
    // An SDK holder's registration leaves the room to the server: fill it to the server's limit.
    let refused: unknown;
    for (let i = 0; i < 20 && !refused; i++) {
      const data = JSON.stringify({ pad: "x".repeat(300) });
      refused = await rejection(storeWrite(kv, `shop.key.n1.api.i${i}`, () => kv.put(`shop.key.n1.api.i${i}`, data), { bytes: data.length, checkRoom: false }));
    }
    expect(isMeshError(refused, ErrorCodes.StoreFull)).toBe(true);
    expect((refused as Error).message).toMatch(
      /^the mesh's store bucket mesh-holders is full \(it holds .* of its max_bytes 1 KiB\), so key shop\.key\.n1\.api\.i\d+ was not stored; it holds the SDK instances' registrations/,
    );
    const cause = (refused as Error).cause as { code?: number; message?: string };
    expect({ code: cause.code, message: cause.message }).toEqual({ code: 10077, message: "maximum bytes exceeded" });
    expect((await bytesOf(jsm, Buckets.holders)).messages).toBeGreaterThan(0);
  });

  it("keep room below max_bytes because nats-server 2.9.10 drops a stream's oldest records at its limit, even with discard new", async () => {
    // Why the mesh stops at 80%: a bare bucket, written past the mesh's check, loses its first key.
    const { nc } = await freshNats();
    const kv = await new Kvm(nc).create("bare", { history: 5, max_bytes: 2_000 });
    expect((await kv.status()).streamInfo.config.discard).toBe(DiscardPolicy.New);
    await kv.put("k1", "x".repeat(100));
    const held = (await kv.status()).size;
    // The server checks what it holds plus the value against max_bytes (1,999 < 2,000: taken),
    // then stores the subject and framing too, and drops the oldest record to get back under.
    await kv.put("k2", "y".repeat(2_000 - held - 1));
    expect(await kv.get("k1")).toBeNull();
    expect((await kv.get("k2"))?.length).toBe(2_000 - held - 1);
  });

  it("refuse a credential's write-ahead record in a full credentials bucket with StoreFull, and keep the generations before", async () => {
    const { nc } = await freshNats();
    const store = await openStore(nc, { bucketLimits: { credentials: { maxBytes: 4 * 1024 } }, log: logged().log });
    const credentials = new CredentialStore(store.kv.credentials, parseMasterKey(randomBytes(32).toString("hex")));
    const g = { module: "shop", requirement: "db", id: "shop/db" };
    let generation = 0;
    let refused: unknown;
    while (!refused && generation < 100) {
      generation++;
      refused = await rejection(credentials.ensure(g, generation, "pg", () => ({ password: randomBytes(24).toString("base64url") })));
    }
    expect(generation).toBeGreaterThan(2);
    expect(isMeshError(refused, ErrorCodes.StoreFull)).toBe(true);
    expect((refused as Error).message).toMatch(
      /^the mesh's store bucket mesh-credentials is full \(it holds .* of its max_bytes 4 KiB\), so key shop\.db\.g\d+ was not stored; it holds the last generations of every credential/,
    );
    for (let k = 1; k < generation; k++) expect((await credentials.read("shop", "db", k))?.secret.password).toBeTruthy();
  });

  it("refuse a value larger than the bucket takes, with InvalidRequest naming the bucket and its value limit", async () => {
    const { nc } = await freshNats();
    const store = await openStore(nc, { bucketLimits: { modules: { maxValueSize: 512 } }, log: logged().log });
    const status = (message: string): ModuleStatus => ({
      module: "shop",
      state: "Ready",
      message,
      requirements: 1,
      manifestRevision: 1,
      processedAt: "t",
      since: "t",
    });
    const e = await rejection(mutateJson(store.kv.modules, "shop", ModuleStatus, () => status("x".repeat(600))));
    expect(isMeshError(e, ErrorCodes.InvalidRequest)).toBe(true);
    expect((e as Error).message).toMatch(/^key shop \(\d+ bytes\) was not stored: the mesh's store bucket mesh-modules takes values of at most 512 bytes/);
    await mutateJson(store.kv.modules, "shop", ModuleStatus, () => status("fits"));
  });
});

/** Makes every bucket as the store did before it had limits (history only), with `discard` as given. */
async function oldStore(nc: NatsConnection, jsm: JetStreamManager): Promise<void> {
  const kvm = new Kvm(nc);
  for (const [name, bucket] of Object.entries(Buckets) as Array<[keyof typeof Buckets, string]>) {
    await kvm.create(bucket, { history: name === "credentials" || name === "grants" ? 16 : 5 });
  }
  // A stream made by an older client or by hand: a full one would drop its oldest records.
  await jsm.streams.update(kvStream(Buckets.verifications), { discard: DiscardPolicy.Old });
}

describe("a store made before its buckets had limits", () => {
  it("is brought up to them when opened, losing nothing, and opening it again changes nothing", async () => {
    const { nc, jsm } = await freshNats();
    await oldStore(nc, jsm);
    const kv = await new Kvm(nc).open(Buckets.grants);
    for (let i = 0; i < 20; i++) await kv.put(`shop.r${i}`, JSON.stringify(grant(`r${i}`)));
    await (await new Kvm(nc).open(Buckets.holders)).put("shop.key.node-a.api.i1", "{}");
    const before = await Promise.all(Object.values(Buckets).map((b) => bytesOf(jsm, b)));
    expect((await jsm.streams.info(kvStream(Buckets.grants))).config.max_bytes).toBe(-1);

    const first = logged();
    const store = await openStore(nc, { log: first.log });
    for (const [name, bucket] of Object.entries(Buckets) as Array<[keyof typeof Buckets, string]>) {
      const c = (await jsm.streams.info(kvStream(bucket))).config;
      expect({ bucket, max_bytes: c.max_bytes, max_msg_size: c.max_msg_size, discard: c.discard, max_age: c.max_age }).toEqual({
        bucket,
        max_bytes: BUCKET_LIMITS[name].maxBytes,
        max_msg_size: BUCKET_LIMITS[name].maxValueSize,
        discard: DiscardPolicy.New,
        max_age: (BUCKET_LIMITS[name].ttlMs ?? 0) * 1_000_000,
      });
    }
    expect(await Promise.all(Object.values(Buckets).map((b) => bytesOf(jsm, b)))).toEqual(before);
    expect(entryJson((await store.kv.grants.get("shop.r19"))!)).toEqual(grant("r19"));
    expect((await store.kv.holders.get("shop.key.node-a.api.i1"))?.string()).toBe("{}");
    const updated = first.capture.lines.filter((l) => /limits brought up to date/.test(l));
    expect(updated).toHaveLength(Object.keys(Buckets).length);
    expect(first.capture.text).not.toMatch(/"level":40/);

    const again = logged();
    await openStore(nc, { log: again.log });
    expect(again.capture.lines).toEqual([]);
  });

  it("keeps a bucket that holds more than its limit unbounded, says so, and loses nothing; keeps a larger limit an operator set", async () => {
    const { nc, jsm } = await freshNats();
    await oldStore(nc, jsm);
    const kv = await new Kvm(nc).open(Buckets.grants);
    for (let i = 0; i < 10; i++) await kv.put(`shop.r${i}`, JSON.stringify(grant(`r${i}`)));
    const held = await bytesOf(jsm, Buckets.grants);
    const operators = BUCKET_LIMITS.rotations.maxBytes * 2;
    await jsm.streams.update(kvStream(Buckets.rotations), { max_bytes: operators, discard: DiscardPolicy.New });

    const { capture, log } = logged();
    await openStore(nc, { log, bucketLimits: { grants: { maxBytes: 2 * 1024 } } });
    const grants = await jsm.streams.info(kvStream(Buckets.grants));
    expect(grants.config.max_bytes).toBe(-1);
    expect(grants.config.max_msg_size).toBe(BUCKET_LIMITS.grants.maxValueSize);
    expect(grants.state).toMatchObject({ messages: held.messages, bytes: held.bytes });
    const warning = capture.lines.map((l) => JSON.parse(l) as { level: number; msg: string; bucket?: string }).find((l) => l.level === 40);
    expect(warning).toMatchObject({ bucket: Buckets.grants });
    expect(warning!.msg).toMatch(
      /^the mesh's store bucket mesh-grants holds .* more than its limit of 2 KiB leaves room for, so it stays unbounded rather than lose records/,
    );
    expect((await jsm.streams.info(kvStream(Buckets.rotations))).config.max_bytes).toBe(operators);
  });
});
