/**
 * Where a `kv.bucket` or `object.store` grant lives on NATS, and what its requirement options
 * ask of the stream behind it: pure functions, no connection.
 *
 * Bucket `<module>_<requirement>`, the same base name the SQL backends give a grant
 * (grant-base-name.ts: `my-shop/cart` → `my__shop_cart`), so one grant has one name
 * everywhere. NATS would take the hyphens as they are, but the shared form is one-to-one as
 * well. It never meets the mesh's own buckets (`mesh-grants` …), which hold a hyphen and no `_`.
 * Two valid mesh names make at most 100 characters (a 100-character bucket works on 2.9.10), so
 * nothing is shortened.
 */
import {
  ErrorCodes,
  Kinds,
  MAX_HISTORY,
  MAX_REPLICAS,
  MIN_TTL_MS,
  MeshError,
  parseDuration,
  requirementOptionNames,
  type RequirementOptions,
} from "@mesh/shared";
import { grantBaseName } from "./grant-base-name.js";

/** Bucket names NATS accepts for KV buckets and object stores alike (the clients' `^[-\w]+$`). */
export const NATS_BUCKET_NAME = /^[A-Za-z0-9_-]{1,200}$/;

/** The two kinds served here. */
/** The kinds served here: the two stores, and the registry kinds as the bootstrap registry serves them (an object store each). */
export type StoreKind = typeof Kinds.KvBucket | typeof Kinds.ObjectStore | typeof Kinds.OciRegistry | typeof Kinds.NpmRegistry;

/** The description that marks a bucket's stream as the mesh's for one grant. */
export const markerOf = (module: string, requirement: string) => `mesh grant ${module}/${requirement}`;

/**
 * The bucket of grant `module/requirement` (see the file comment); the grant is checked first.
 * Throws MeshError `InvalidName` when the result is not a NATS bucket name.
 */
export function bucketName(module: string, requirement: string): string {
  return checkBucketName(grantBaseName(module, requirement, MAX_BUCKET_LENGTH));
}

/** Above the longest base name of two mesh names (100), so none is shortened. */
const MAX_BUCKET_LENGTH = 120;

/** Throws MeshError `InvalidName` unless `name` matches {@link NATS_BUCKET_NAME}; returns `name`. */
export function checkBucketName(name: string): string {
  if (typeof name !== "string" || !NATS_BUCKET_NAME.test(name)) {
    throw new MeshError(ErrorCodes.InvalidName, `NATS bucket name ${JSON.stringify(name)} is refused: it must be 1-200 characters of letters, digits, _ and -`);
  }
  return name;
}

/** The JetStream stream behind a bucket: `KV_<bucket>` or `OBJ_<bucket>`, as the clients name it. */
export function streamName(kind: StoreKind, bucket: string): string {
  return `${kind === Kinds.KvBucket ? "KV_" : "OBJ_"}${checkBucketName(bucket)}`;
}

/**
 * What a bucket's stream must be, every field given: an option left out means the default, so
 * removing an option from the manifest converges the bucket back to it.
 */
export interface StoreLimits {
  /** KV only: values kept per key (the stream's `max_msgs_per_subject`); default 1. */
  history?: number;
  /** How long a value (KV) or an object (object store) is kept, in ms; 0 (default): until deleted. */
  ttlMs: number;
  /** Most bytes the bucket holds; -1 (default): no limit. */
  maxBytes: number;
  /** Copies on a cluster; default 1. */
  replicas: number;
}

/** The options each kind accepts, in the order they are listed in messages (their types: requirement-options.ts in @mesh/shared). */
export const STORE_OPTIONS: Record<StoreKind, readonly string[]> = {
  [Kinds.KvBucket]: requirementOptionNames(Kinds.KvBucket),
  [Kinds.ObjectStore]: requirementOptionNames(Kinds.ObjectStore),
  [Kinds.OciRegistry]: requirementOptionNames(Kinds.OciRegistry),
  [Kinds.NpmRegistry]: requirementOptionNames(Kinds.NpmRegistry),
};

/**
 * The limits the requirement options of `kind` ask for (see {@link StoreLimits}). Throws
 * MeshError `InvalidRequest`, naming the option, for an unknown or invalid one.
 */
export function storeLimits(kind: StoreKind, options: RequirementOptions = {}, grant = "the grant"): StoreLimits {
  const bad = (option: string, rule: string) =>
    new MeshError(ErrorCodes.InvalidRequest, `option ${option} of ${kind} ${grant} ${rule}; got ${JSON.stringify(options[option])}`);
  for (const option of Object.keys(options)) {
    if (!STORE_OPTIONS[kind].includes(option)) {
      throw new MeshError(ErrorCodes.InvalidRequest, `option ${option} of ${kind} ${grant} is unknown; ${kind} takes ${STORE_OPTIONS[kind].join(", ")}`);
    }
  }
  const integer = (option: string, min: number, max: number, rule: string): number | undefined => {
    const v = options[option];
    if (v === undefined) return undefined;
    const n = typeof v === "number" ? v : typeof v === "string" && /^\d+$/.test(v) ? Number(v) : NaN;
    if (!Number.isSafeInteger(n) || n < min || n > max) throw bad(option, rule);
    return n;
  };
  let ttlMs = 0;
  if (options.ttl !== undefined) {
    try {
      ttlMs = typeof options.ttl === "string" ? parseDuration(options.ttl) : NaN;
    } catch {
      ttlMs = NaN;
    }
    if (!(ttlMs >= MIN_TTL_MS)) throw bad("ttl", "must be a duration of at least 100ms, such as 90s, 10m, 2h or 30d");
  }
  const limits: StoreLimits = {
    ttlMs,
    maxBytes: integer("maxBytes", 1, Number.MAX_SAFE_INTEGER, "must be a whole number of bytes, at least 1") ?? -1,
    replicas: integer("replicas", 1, MAX_REPLICAS, `must be a whole number from 1 to ${MAX_REPLICAS}`) ?? 1,
  };
  if (kind === Kinds.KvBucket) {
    limits.history = integer("history", 1, MAX_HISTORY, `must be a whole number from 1 to ${MAX_HISTORY} (values kept per key)`) ?? 1;
  }
  return limits;
}

/** The stream fields {@link StoreLimits} set, as JetStream names them (`max_age` in nanoseconds). */
export interface StreamLimits {
  max_age: number;
  max_bytes: number;
  num_replicas: number;
  max_msgs_per_subject?: number;
}

/** {@link StoreLimits} as stream fields. */
export function streamLimits(limits: StoreLimits): StreamLimits {
  const out: StreamLimits = { max_age: limits.ttlMs * 1_000_000, max_bytes: limits.maxBytes, num_replicas: limits.replicas };
  if (limits.history !== undefined) out.max_msgs_per_subject = limits.history;
  return out;
}

/**
 * The stream update that brings a stream configured as `current` to `limits`, or undefined
 * when it is there already. A TTL shorter than the stream's de-duplication window shortens the
 * window too, as the server refuses a window longer than `max_age`.
 */
export function limitsUpdate(
  current: StreamLimits & { duplicate_window?: number },
  limits: StoreLimits,
): (Partial<StreamLimits> & { duplicate_window?: number }) | undefined {
  const want = streamLimits(limits);
  const update: Partial<StreamLimits> & { duplicate_window?: number } = {};
  for (const key of Object.keys(want) as Array<keyof StreamLimits>) {
    if (current[key] !== want[key]) update[key] = want[key];
  }
  if (Object.keys(update).length === 0) return undefined;
  if (want.max_age > 0 && (current.duplicate_window ?? 0) > want.max_age) update.duplicate_window = want.max_age;
  return update;
}
