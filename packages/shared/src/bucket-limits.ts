/**
 * The limits of the mesh's KV buckets (limits.ts `BUCKET_LIMITS`): how a store that already
 * exists is brought up to them, and the room the mesh's writers leave. A bucket made before it
 * had limits gets them when the store is opened (store.ts `openStore`, as {@link planBucketLimits}
 * says): a stream update, which nats-server 2.9 allows for `max_bytes`, `max_msg_size`,
 * `max_age` and `discard`. That update can lose data — a `max_bytes` below what the stream
 * holds makes the server drop its oldest messages at once (seen here on 2.9.10: 10 records,
 * 3 left) — so the plan never sets one the bucket's content does not fit under, never lowers a
 * limit it finds (an operator may have raised it), and says when it kept one.
 *
 * Writes ({@link storeWrite}) stop at {@link STORE_FILL_SHARE} of `max_bytes`, with a MeshError
 * that names the bucket and what to do, since 2.9.10 itself drops old records at its limit.
 */
import { DiscardPolicy, JetStreamApiError, type StreamConfig } from "@nats-io/jetstream";
import type { KV } from "@nats-io/kv";
import { ErrorCodes, MeshError } from "./errors.js";
import { BUCKET_LIMITS, STORE_FILL_SHARE, formatBytes, type BucketLimits } from "./limits.js";
import { Buckets } from "./subjects.js";

/** What a bucket's stream has now, as far as its limits go; `-1` or `0` for "none". */
export interface StreamLimitsNow {
  max_bytes: number;
  max_msg_size: number;
  /** Nanoseconds. */
  max_age: number;
  discard: DiscardPolicy;
  /** What the stream holds, in bytes. */
  bytes: number;
}

/** The limits to change, and why one was left as it is. */
export interface BucketLimitsPlan {
  changes: Partial<Pick<StreamConfig, "max_bytes" | "max_msg_size" | "max_age" | "discard">>;
  /** Set when `max_bytes` stays unbounded because the bucket holds too much for the limit. */
  kept?: string;
}

const unset = (n: number) => !(n > 0);

/** How many bytes the mesh fills a bucket of `max_bytes` to (no limit: none). */
export function fillLimit(maxBytes: number): number {
  return unset(maxBytes) ? Infinity : Math.floor(maxBytes * STORE_FILL_SHARE);
}

/**
 * What it takes to bring `bucket`'s stream (as `now`) up to `want`: each limit that is unset or
 * lower is set to `want`'s; one that is higher stays. `max_bytes` is not set on a bucket whose
 * content and one more value would not fit under {@link fillLimit} of it: it stays unbounded,
 * and `kept` says so. With a `max_bytes`, `discard` becomes `new`, so a full bucket refuses a
 * write rather than drop its oldest records. Pure.
 */
export function planBucketLimits(bucket: string, now: StreamLimitsNow, want: BucketLimits): BucketLimitsPlan {
  const changes: BucketLimitsPlan["changes"] = {};
  let kept: string | undefined;
  if (unset(now.max_msg_size) || now.max_msg_size < want.maxValueSize) changes.max_msg_size = want.maxValueSize;
  if (!unset(now.max_bytes) && now.max_bytes < want.maxBytes) changes.max_bytes = want.maxBytes;
  if (unset(now.max_bytes)) {
    if (now.bytes + want.maxValueSize <= fillLimit(want.maxBytes)) changes.max_bytes = want.maxBytes;
    else {
      kept =
        `the mesh's store bucket ${bucket} holds ${formatBytes(now.bytes)}, more than its limit of ${formatBytes(want.maxBytes)} leaves room for, ` +
        `so it stays unbounded rather than lose records: find out what fills it (it holds ${want.holds}) and remove what is not needed, ` +
        `or set a limit yourself, at least ${formatBytes(Math.ceil((now.bytes + want.maxValueSize) / STORE_FILL_SHARE))} (nats stream edit KV_${bucket} --max-bytes …), which the mesh keeps`;
    }
  }
  if (!unset(changes.max_bytes ?? now.max_bytes) && now.discard !== DiscardPolicy.New) changes.discard = DiscardPolicy.New;
  if (want.ttlMs !== undefined && unset(now.max_age)) changes.max_age = want.ttlMs * 1_000_000;
  return { changes, ...(kept ? { kept } : {}) };
}

/** Whether the server refused a write because the bucket (its stream) is full. */
export function isBucketFull(e: unknown): boolean {
  return e instanceof JetStreamApiError && e.code === 10077 && /maximum bytes exceeded/i.test(e.message);
}

/** Whether the server refused a write because the value is larger than the bucket takes. */
export function isValueTooLarge(e: unknown): boolean {
  return e instanceof JetStreamApiError && e.code === 10054;
}

/** What a write of `bytes` of value at `key` adds to its bucket's stream, at most: the value, its subject, headers and framing. */
export function storedSize(bucket: string, key: string, bytes: number): number {
  return bytes + `$KV.${bucket}.${key}`.length + STORED_OVERHEAD;
}
/** A stored message's framing (30 bytes measured) and the headers a compare-and-set write sends (52 for a create). */
const STORED_OVERHEAD = 128;

/** A bucket's size as this process last read it; read again when a second old, or when a write would not fit. */
interface Gauge {
  bucket: string;
  bytes: number;
  maxBytes: number;
  maxValueSize: number;
  at: number;
}
const gauges = new WeakMap<KV, Gauge>();
const GAUGE_MS = 1_000;

async function readGauge(kv: KV): Promise<Gauge | undefined> {
  try {
    const s = await kv.status();
    const g = { bucket: s.bucket, bytes: s.size, maxBytes: s.max_bytes, maxValueSize: s.maxValueSize, at: Date.now() };
    gauges.set(kv, g);
    return g;
  } catch {
    return undefined; // the server's own limit still holds
  }
}

/** How {@link storeWrite} checks a write. */
export interface StoreWriteOptions {
  /** The value's size, for the room check and the messages. */
  bytes?: number;
  /**
   * Whether to refuse the write when it would take the bucket past {@link fillLimit} (default
   * true, given `bytes`). A writer that refreshes its record all the time (an SDK holder's
   * registration) leaves it to the server, rather than read the bucket's size as often.
   */
  checkRoom?: boolean;
}

/**
 * Runs `write`, a write of key `key` to `kv`. Refuses it first, with MeshError `StoreFull`,
 * when it would take the bucket past {@link fillLimit} of its `max_bytes` (as last read, at most
 * a second ago, and again when it would not fit). A refusal by the server because the bucket is
 * full is `StoreFull` too, one because the value is too large `InvalidRequest`, each naming the
 * bucket, its size and limit, and what to do; anything else is thrown as it is.
 */
export async function storeWrite<T>(kv: KV, key: string, write: () => Promise<T>, opts: StoreWriteOptions = {}): Promise<T> {
  const { bytes } = opts;
  let g: Gauge | undefined;
  let adds = 0;
  if (bytes !== undefined && opts.checkRoom !== false) {
    g = gauges.get(kv);
    if (!g || Date.now() - g.at > GAUGE_MS) g = await readGauge(kv);
    if (g) {
      adds = storedSize(g.bucket, key, bytes);
      if (g.bytes + adds > fillLimit(g.maxBytes)) g = await readGauge(kv);
      if (g && g.bytes + adds > fillLimit(g.maxBytes)) throw full(g.bucket, key, g);
    }
  }
  try {
    const r = await write();
    if (g) g.bytes += adds;
    return r;
  } catch (e) {
    if (!isBucketFull(e) && !isValueTooLarge(e)) throw e;
    const s = await readGauge(kv);
    if (isValueTooLarge(e)) {
      throw new MeshError(
        ErrorCodes.InvalidRequest,
        `key ${key}${bytes === undefined ? "" : ` (${formatBytes(bytes)})`} was not stored: the mesh's store bucket ${s?.bucket ?? "(unknown)"} takes values of at most ${s ? formatBytes(s.maxValueSize) : "its max_msg_size"}; what it would record is too large (a document or option that large, or a rotation of that many holders, cannot be kept)`,
        { cause: e },
      );
    }
    throw full(s?.bucket ?? "(unknown)", key, s, e);
  }
}

/** The `StoreFull` refusal of a write of `key` to `bucket`. */
function full(bucket: string, key: string, g: Gauge | undefined, cause?: unknown): MeshError {
  const size = g
    ? ` (it holds ${formatBytes(g.bytes)}; the mesh fills it to ${formatBytes(fillLimit(g.maxBytes))}, ${Math.round(STORE_FILL_SHARE * 100)}% of its max_bytes ${formatBytes(g.maxBytes)})`
    : "";
  const name = (Object.keys(Buckets) as Array<keyof typeof Buckets>).find((k) => Buckets[k] === bucket);
  const holds = name ? `; it holds ${BUCKET_LIMITS[name].holds}` : "";
  return new MeshError(
    ErrorCodes.StoreFull,
    `the mesh's store bucket ${bucket} is full${size}, so key ${key} was not stored${holds}. Free space in it (a deleted key's history stays until the key is purged) ` +
      `or raise its limit, e.g. nats stream edit KV_${bucket} --max-bytes <more> (the mesh keeps a larger limit it finds); see docs/security.md, "Limits"`,
    cause === undefined ? {} : { cause },
  );
}
