import { describe, expect, it } from "vitest";
import { ErrorCodes, Kinds, type ErrorCode, type RequirementOptions } from "@mesh/shared";
import { NATS_BUCKET_NAME, bucketName, limitsUpdate, storeLimits, streamName, type StoreKind } from "./jetstream-store-layout.js";

/** Expects `fn` to throw a MeshError of `code` whose message contains `text`. */
const refused = (fn: () => unknown, code: ErrorCode, text = "") =>
  expect(fn).toThrow(expect.objectContaining({ code, message: expect.stringContaining(text) }));

describe("bucketName", () => {
  it.each([
    ["shop", "cart", "shop_cart"],
    ["my-shop", "cart", "my__shop_cart"],
    ["a", "b-c", "a_b_c"],
  ])("%s/%s → %s, as the SQL backends name it", (module, requirement, expected) => {
    expect(bucketName(module, requirement)).toBe(expected);
  });

  it("never shortens: the longest mesh names, hyphens doubled, stay a full NATS bucket name", () => {
    const module = "a-b".repeat(20).slice(0, 39) + "c";
    const requirement = "r".repeat(40);
    const bucket = bucketName(module, requirement);
    expect(bucket).toBe(`${module.replaceAll("-", "__")}_${requirement}`);
    expect(bucket).toMatch(NATS_BUCKET_NAME);
  });

  it("refuses what is no bucket name, and so does streamName", () => {
    refused(() => bucketName('x"; DROP', "db"), ErrorCodes.InvalidName, "refused");
    refused(() => streamName(Kinds.KvBucket, "a.>"), ErrorCodes.InvalidName);
    expect(streamName(Kinds.KvBucket, "shop_cart")).toBe("KV_shop_cart");
    expect(streamName(Kinds.ObjectStore, "shop_cart")).toBe("OBJ_shop_cart");
  });
});

describe("storeLimits", () => {
  it.each<[StoreKind, RequirementOptions, object]>([
    [Kinds.KvBucket, {}, { history: 1, ttlMs: 0, maxBytes: -1, replicas: 1 }],
    [Kinds.KvBucket, { history: 64, ttl: "2h", maxBytes: 1024, replicas: 3 }, { history: 64, ttlMs: 7_200_000, maxBytes: 1024, replicas: 3 }],
    [Kinds.KvBucket, { history: "5", maxBytes: "2048", ttl: "100ms" }, { history: 5, ttlMs: 100, maxBytes: 2048, replicas: 1 }],
    [Kinds.ObjectStore, {}, { ttlMs: 0, maxBytes: -1, replicas: 1 }],
    [Kinds.ObjectStore, { ttl: "30d", replicas: 5 }, { ttlMs: 2_592_000_000, maxBytes: -1, replicas: 5 }],
  ])("%s %j → %j", (kind, options, expected) => {
    expect(storeLimits(kind, options)).toEqual(expected);
  });

  it.each<[StoreKind, RequirementOptions, string]>([
    [Kinds.KvBucket, { history: 0 }, "history"],
    [Kinds.KvBucket, { history: 65 }, "history"],
    [Kinds.KvBucket, { history: true }, "history"],
    [Kinds.KvBucket, { ttl: "99ms" }, "ttl"],
    [Kinds.KvBucket, { ttl: ["1h"] }, "ttl"],
    [Kinds.KvBucket, { maxBytes: 0 }, "maxBytes"],
    [Kinds.KvBucket, { replicas: 0 }, "replicas"],
    [Kinds.KvBucket, { replicas: "3x" }, "replicas"],
    [Kinds.KvBucket, { size: 1 }, "size"],
    [Kinds.ObjectStore, { history: 1 }, "history"],
  ])("%s %j is InvalidRequest naming %s", (kind, options, option) => {
    refused(() => storeLimits(kind, options, "shop/cart"), ErrorCodes.InvalidRequest, `option ${option} of ${kind} shop/cart`);
  });
});

describe("limitsUpdate", () => {
  const current = { max_msgs_per_subject: 1, max_age: 0, max_bytes: -1, num_replicas: 1, duplicate_window: 120e9 };

  it("is undefined when the stream is as asked", () => {
    expect(limitsUpdate(current, storeLimits(Kinds.KvBucket, {}))).toBeUndefined();
  });

  it("names only what changes, and shortens a de-duplication window longer than the ttl", () => {
    expect(limitsUpdate(current, storeLimits(Kinds.KvBucket, { history: 4 }))).toEqual({ max_msgs_per_subject: 4 });
    expect(limitsUpdate(current, storeLimits(Kinds.KvBucket, { ttl: "30s" }))).toEqual({ max_age: 30e9, duplicate_window: 30e9 });
    expect(limitsUpdate(current, storeLimits(Kinds.KvBucket, { ttl: "1h" }))).toEqual({ max_age: 3_600e9 });
  });

  it("leaves max_msgs_per_subject of an object store alone", () => {
    const obj = { ...current, max_msgs_per_subject: -1 };
    expect(limitsUpdate(obj, storeLimits(Kinds.ObjectStore, {}))).toBeUndefined();
    expect(limitsUpdate(obj, storeLimits(Kinds.ObjectStore, { maxBytes: 10 }))).toEqual({ max_bytes: 10 });
  });
});
