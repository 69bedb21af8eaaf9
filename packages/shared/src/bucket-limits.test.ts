import { describe, expect, it } from "vitest";
import { DiscardPolicy } from "@nats-io/jetstream";
import { fillLimit, planBucketLimits, type StreamLimitsNow } from "./bucket-limits.js";
import { BUCKET_LIMITS, STORE_SCALE, type BucketLimits } from "./limits.js";
import { encrypt, parseMasterKey } from "./crypto.js";
import { DeliveryReceipt, Grant, RECEIPT_MESSAGE_MAX } from "./schemas/grant.js";
import { Rotation } from "./schemas/rotation.js";
import { Buckets } from "./subjects.js";

const want: BucketLimits = { history: 5, maxBytes: 10_000, maxValueSize: 1_000, holds: "things" };
const none: StreamLimitsNow = { max_bytes: -1, max_msg_size: -1, max_age: 0, discard: DiscardPolicy.New, bytes: 0 };

describe("planBucketLimits", () => {
  it.each<[string, Partial<StreamLimitsNow>, Partial<BucketLimits>, object]>([
    ["a bucket without limits gets them", {}, {}, { max_bytes: 10_000, max_msg_size: 1_000 }],
    ["one that has them changes nothing", { max_bytes: 10_000, max_msg_size: 1_000 }, {}, {}],
    ["a lower limit is raised", { max_bytes: 5_000, max_msg_size: 500 }, {}, { max_bytes: 10_000, max_msg_size: 1_000 }],
    ["a higher one (an operator's) is kept", { max_bytes: 50_000, max_msg_size: 5_000 }, {}, {}],
    [
      "discard old becomes new, so a full bucket refuses rather than drops its oldest",
      { max_bytes: 10_000, max_msg_size: 1_000, discard: DiscardPolicy.Old },
      {},
      { discard: DiscardPolicy.New },
    ],
    ["an age limit is set where there is none", {}, { ttlMs: 3_600_000 }, { max_bytes: 10_000, max_msg_size: 1_000, max_age: 3_600_000_000_000 }],
    ["an age limit there is stays", { max_bytes: 10_000, max_msg_size: 1_000, max_age: 60_000_000_000 }, { ttlMs: 3_600_000 }, {}],
    [
      "it holds exactly as much as leaves room for one more value under the share the mesh fills",
      { bytes: 7_000 },
      {},
      { max_bytes: 10_000, max_msg_size: 1_000 },
    ],
  ])("%s", (_, now, over, changes) => {
    const plan = planBucketLimits("mesh-x", { ...none, ...now }, { ...want, ...over });
    expect(plan.changes).toEqual(changes);
    expect(plan.kept).toBeUndefined();
  });

  it("leaves unbounded a bucket that holds more than its limit leaves room for (one byte past), and says so", () => {
    const plan = planBucketLimits("mesh-x", { ...none, bytes: 7_001, discard: DiscardPolicy.Old }, want);
    expect(plan.changes).toEqual({ max_msg_size: 1_000 });
    expect(plan.kept).toMatch(
      /^the mesh's store bucket mesh-x holds 6\.8 KiB, more than its limit of 9\.8 KiB leaves room for, so it stays unbounded rather than lose records: .*it holds things.*at least 9\.8 KiB \(nats stream edit KV_mesh-x --max-bytes/,
    );
  });

  it("fills a bucket to 80% of its max_bytes, and an unbounded one without end", () => {
    expect(fillLimit(10_000)).toBe(8_000);
    expect(fillLimit(-1)).toBe(Infinity);
  });
});

describe("BUCKET_LIMITS hold STORE_SCALE", () => {
  const now = new Date().toISOString();
  /** Stored bytes of one revision: the value, its subject, and the stream's overhead (30 bytes measured, more with headers). */
  const stored = (bucket: string, key: string, value: unknown) => JSON.stringify(value).length + `$KV.${bucket}.${key}`.length + 40;
  const condition = (type: string, reason: string, message: string) => ({ type, status: "True", reason, message, observedAt: now });
  const grant = Grant.parse({
    id: "shop-orders/events",
    module: "shop-orders",
    requirement: "events",
    kind: "nats.user",
    parts: ["api", "worker"],
    targets: [
      { part: "api", node: "node-a" },
      { part: "worker", node: "node-b" },
    ],
    provider: "nats-main",
    generation: 12,
    resource: { user: "shop-orders_events_12", publish: "app.shop-orders.>", subscribe: "app.shop-orders.>,_INBOX.>", expires: now, provider: "nats-main" },
    holders: { "node-a/api": { generation: 12, deliveredAt: now }, "node-b/worker": { generation: 12, deliveredAt: now } },
    conditions: [
      condition("Resolved", "ProviderSelected", "provider nats-main (node node-a)"),
      condition(
        "Provisioned",
        "Provisioned",
        "generation 12 on nats-main: user shop-orders_events_12, publish app.shop-orders.>, subscribe app.shop-orders.>,_INBOX.>",
      ),
      condition("Delivered", "Delivered", "generation 12 delivered to every target (2)"),
      condition("Verified", "Verified", "generation 12 verified: the verifier and 2 agents logged in"),
    ],
    verify: { every: "30s" },
  });
  const mk = parseMasterKey("00".repeat(32));
  const creds = `-----BEGIN NATS USER JWT-----\n${"e".repeat(900)}\n------END NATS USER JWT------\n\n${"*".repeat(400)}\n-----BEGIN USER NKEY SEED-----\nSU${"A".repeat(56)}\n------END USER NKEY SEED------\n`;
  const bindings = {
    type: "nats",
    provider: "nats-main",
    host: "127.0.0.1",
    port: "4222",
    uri: "nats://127.0.0.1:4222",
    username: "shop-orders_events_12",
    nkey: `U${"A".repeat(55)}`,
    creds,
  };
  const credential = (withBindings: boolean) => ({
    grant: grant.id,
    generation: 12,
    provider: "nats-main",
    createdAt: now,
    ...(withBindings ? { appliedAt: now } : {}),
    encrypted: encrypt(mk, JSON.stringify({ secret: { seed: `SU${"A".repeat(56)}` }, ...(withBindings ? { bindings } : {}) }), "shop-orders.events.g12"),
  });
  const holders = (n: number) =>
    Object.fromEntries(Array.from({ length: n }, (_, i) => [`node-a/api/i${String(i).padStart(10, "0")}`, { r: 123456, a: 234567, c: 345678 }]));
  const rotation = (n: number) =>
    Rotation.parse({
      id: "shop-orders/events#13",
      grant: grant.id,
      module: "shop-orders",
      requirement: "events",
      kind: "nats.user",
      provider: "nats-main",
      from: 12,
      to: 13,
      state: "Committed",
      requestedAt: now,
      deadline: now,
      holders: holders(n),
      committedAt: now,
    });

  it("grants: every grant at every revision, twice over", () => {
    expect(STORE_SCALE.grants * BUCKET_LIMITS.grants.history * stored(Buckets.grants, "shop-orders.events", grant) * 2).toBeLessThanOrEqual(
      fillLimit(BUCKET_LIMITS.grants.maxBytes),
    );
  });

  it("credentials: every generation of every grant, each written twice (write-ahead, then with its bindings), twice over", () => {
    const perGeneration =
      stored(Buckets.credentials, "shop-orders.events.g12", credential(false)) + stored(Buckets.credentials, "shop-orders.events.g12", credential(true));
    expect(JSON.stringify(credential(true)).length).toBeLessThanOrEqual(BUCKET_LIMITS.credentials.maxValueSize);
    expect(STORE_SCALE.grants * STORE_SCALE.generations * perGeneration * 2).toBeLessThanOrEqual(fillLimit(BUCKET_LIMITS.credentials.maxBytes));
  });

  it("rotations: one with twice the benchmark's 5,000 holders fits in a value; every grant's at every revision fits the bucket", () => {
    expect(JSON.stringify(rotation(2 * 5_000)).length).toBeLessThanOrEqual(BUCKET_LIMITS.rotations.maxValueSize);
    expect(STORE_SCALE.grants * BUCKET_LIMITS.rotations.history * stored(Buckets.rotations, "shop-orders.events", rotation(2)) * 2).toBeLessThanOrEqual(
      fillLimit(BUCKET_LIMITS.rotations.maxBytes),
    );
  });

  it("holders: every live instance at every revision, twice over", () => {
    const reg = {
      holder: "node-a/api/i0123456789",
      grant: grant.id,
      node: "node-a",
      part: "api",
      instance: "i0123456789",
      registeredAt: now,
      seenAt: now,
      xkey: `X${"A".repeat(55)}`,
    };
    expect(JSON.stringify(reg).length).toBeLessThanOrEqual(BUCKET_LIMITS.holders.maxValueSize);
    expect(
      STORE_SCALE.holders * BUCKET_LIMITS.holders.history * stored(Buckets.holders, "shop-orders.events.node-a.api.i0123456789", reg) * 2,
    ).toBeLessThanOrEqual(fillLimit(BUCKET_LIMITS.holders.maxBytes));
  });

  it("receipts: one with a hook's failure at the longest message fits in a value; two per grant at every revision fit the bucket", () => {
    const longest = "x".repeat(RECEIPT_MESSAGE_MAX);
    const r = DeliveryReceipt.parse({
      generation: 12,
      deliveredAt: now,
      failure: { generation: 13, message: longest, at: now },
      hook: { rotation: "shop-orders/events#13", generation: 13, failed: { reason: "HookFailed", message: longest, at: now } },
    });
    expect(JSON.stringify(r).length).toBeLessThanOrEqual(BUCKET_LIMITS.receipts.maxValueSize);
    // A typical one: a delivery, and now and then a hook's failure of a few hundred bytes.
    const typical = {
      generation: 12,
      deliveredAt: now,
      hook: { rotation: "shop-orders/events#13", generation: 13, failed: { reason: "HookFailed", message: "x".repeat(300), at: now } },
    };
    expect(
      STORE_SCALE.grants * 2 * BUCKET_LIMITS.receipts.history * stored(Buckets.receipts, "node-a.shop-orders.events.api", typical) * 2,
    ).toBeLessThanOrEqual(fillLimit(BUCKET_LIMITS.receipts.maxBytes));
  });

  it("every value limit is within NATS's default max_payload (1 MiB)", () => {
    for (const [name, l] of Object.entries(BUCKET_LIMITS)) expect(l.maxValueSize, name).toBeLessThanOrEqual(1024 * 1024);
  });
});
