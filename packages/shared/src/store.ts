/**
 * The mesh's store: its KV buckets and streams, opened (and made, and brought up to their
 * limits) by every process alike.
 */
import type { NatsConnection } from "@nats-io/transport-node";
import {
  DiscardPolicy,
  JetStreamApiError,
  jetstream,
  jetstreamManager,
  RetentionPolicy,
  StorageType,
  type JetStreamClient,
  type JetStreamManager,
  type JsMsg,
} from "@nats-io/jetstream";
import { Kvm, type KV } from "@nats-io/kv";
import { Buckets, Streams, subjects, type BucketName } from "./subjects.js";
import { ErrorCodes, MeshError, errorMessage } from "./errors.js";
import { AUDIT_LIMITS, BUCKET_LIMITS, type BucketLimits } from "./limits.js";
import { formatAge } from "./duration.js";
import { planBucketLimits } from "./bucket-limits.js";
import { isJetStreamGap, jetStreamUnavailable, retryJetStreamSetup, type JetStreamUnavailable } from "./jetstream-retry.js";
import { kvStream } from "./kv-names.js";

export type { KV, JetStreamClient, JetStreamManager, JsMsg };

/** Bucket `bucket` of the store, opened as it is (neither made nor changed): for a reader that must not alter the store. */
export function openBucket(nc: NatsConnection, bucket: BucketName): Promise<KV> {
  return new Kvm(jetstream(nc)).open(bucket);
}

/** The mesh's KV buckets and streams, opened (and created when missing). */
export interface Store {
  nc: NatsConnection;
  js: JetStreamClient;
  jsm: JetStreamManager;
  kv: Record<keyof typeof Buckets, KV>;
}

/** Where opening the store says what it changed of a bucket's limits, and what it kept (a pino Logger is one). */
export interface StoreLog {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

/**
 * The store's own log when its opener passes none (a test, a script): one JSON line on stderr
 * per change, shaped as the services' logger writes them. The services pass their logger.
 */
const stderrLine =
  (level: "info" | "warn") =>
  (obj: object, msg: string): void =>
    void process.stderr.write(`${JSON.stringify({ level, name: "store", ...obj, msg })}\n`);
export const stderrStoreLog: StoreLog = { info: stderrLine("info"), warn: stderrLine("warn") };

/** How {@link openStore} makes the store. */
export interface OpenStoreOptions {
  /** 1 on one server, 3 on a cluster; default {@link storeReplicas}. */
  replicas?: number;
  /** Where it says what it changed of an existing bucket's limits, and what it kept; default {@link stderrStoreLog}. */
  log?: StoreLog;
  /** Limits other than limits.ts's `BUCKET_LIMITS`, per bucket, for the buckets this call makes or brings up to them (a store sized otherwise; a test's bucket that fills up). */
  bucketLimits?: Partial<Record<keyof typeof Buckets, Partial<BucketLimits>>>;
  /** How long to ride out a JetStream that does not answer or fails to make a stream's store; default 20 s, 0 for one attempt (a caller with a deadline of its own). */
  rideOutMs?: number;
  /** How long the store's JetStream requests wait for an answer; default 10 s. */
  apiTimeoutMs?: number;
  /**
   * How long the audit trail keeps a record (limits.ts `AUDIT_LIMITS`): the stream is made with
   * it, and one made with another is changed to it (which only the operator's identity may do).
   * Unset: made with the default, an existing one left as it is.
   */
  auditRetentionMs?: number;
}

/**
 * Opens the store, creating buckets and streams that do not exist yet, and bringing the limits
 * of buckets that do up to `BUCKET_LIMITS` (bucket-limits.ts says how, and that it loses
 * nothing); safe to call from every process at once. Rides out, for 20 s, a JetStream that
 * does not answer or fails to create a stream's store (a cluster still forming).
 */
export async function openStore(nc: NatsConnection, opts: OpenStoreOptions = {}): Promise<Store> {
  const replicas = opts.replicas ?? storeReplicas(nc.info, process.env);
  return retryJetStreamSetup(() => openStoreOnce(nc, replicas, opts), opts.rideOutMs ?? 20_000);
}

/**
 * How many copies the store's buckets and streams are made with: `MESH_REPLICAS` when set (a
 * whole number from 1 to 5), else what the server says of itself: 3 on a cluster of three or
 * more servers (its `connect_urls` list every member's client address), else 1. A cluster
 * that does not advertise its members (`no_advertise`) counts as one server: set
 * MESH_REPLICAS there. Only a bucket or stream made from now on gets it.
 */
export function storeReplicas(info: { cluster?: string; connect_urls?: string[] } | undefined, env: NodeJS.ProcessEnv = process.env): number {
  const named = env.MESH_REPLICAS;
  if (named) {
    const n = Number(named);
    if (!Number.isInteger(n) || n < 1 || n > 5)
      throw new MeshError(
        ErrorCodes.InvalidRequest,
        `MESH_REPLICAS=${named} is not a whole number from 1 to 5: set 1 for one NATS server, 3 for a cluster of three`,
      );
    return n;
  }
  return info?.cluster && (info.connect_urls?.length ?? 0) >= 3 ? 3 : 1;
}

/** What a service's log says of a JetStream that was not there when it opened the store. */
const UNAVAILABLE_WORDS: Readonly<Record<JetStreamUnavailable, string>> = {
  "cluster-electing": "its cluster has no JetStream leader to answer now (one is elected while a majority of its servers run)",
  "server-without-jetstream": "it runs without JetStream: start it with -js (see deploy/nats/single.conf)",
  "account-without-jetstream": "JetStream is not enabled for this identity's account",
  "no-answer": "JetStream did not answer in time",
};

async function openStoreOnce(nc: NatsConnection, replicas: number, opts: OpenStoreOptions): Promise<Store> {
  const timeout = opts.apiTimeoutMs ?? 10_000;
  const jsm = await jetstreamManager(nc, { timeout }).catch((e: unknown) => {
    const why = jetStreamUnavailable(e, nc.info);
    throw new MeshError(
      ErrorCodes.ProviderUnreachable,
      `the NATS server at ${nc.getServer()}: ${why ? UNAVAILABLE_WORDS[why] : "JetStream refused"} (${errorMessage(e)})`,
      {
        cause: e,
      },
    );
  });
  const js = jetstream(nc, { timeout });
  const kvm = new Kvm(js);
  const kv = {} as Record<keyof typeof Buckets, KV>;
  let log = opts.log;
  for (const [name, bucket] of Object.entries(Buckets) as Array<[keyof typeof Buckets, BucketName]>) {
    const limits = { ...BUCKET_LIMITS[name], ...opts.bucketLimits?.[name] };
    kv[name] = await kvm.create(bucket, {
      history: limits.history,
      replicas,
      storage: StorageType.File,
      max_bytes: limits.maxBytes,
      maxValueSize: limits.maxValueSize,
      ...(limits.ttlMs !== undefined ? { ttl: limits.ttlMs } : {}),
    });
    await ensureBucketLimits(jsm, bucket, limits, (log ??= stderrStoreLog));
  }
  // Every stream: limits retention, file storage, the store's replicas, a 2-minute de-duplication window.
  const common = { retention: RetentionPolicy.Limits, num_replicas: replicas, storage: StorageType.File, duplicate_window: 120_000_000_000 };
  await ensureStream(jsm, {
    ...common,
    name: Streams.deliveries,
    subjects: [subjects.deliveriesAll],
    // The latest few deliveries of each grant to each part; older ones are superseded.
    max_msgs_per_subject: 4,
  });
  await ensureAuditStream(jsm, { ...common }, opts.auditRetentionMs, log ?? stderrStoreLog);
  return { nc, js, jsm, kv };
}

/**
 * Brings the stream of KV bucket `bucket` up to `limits` (planBucketLimits) with one stream
 * update, logging what changed; a limit it keeps, or an update the server refuses (an identity
 * without the right to update streams), is a warning, and the caller goes on.
 */
export async function ensureBucketLimits(jsm: JetStreamManager, bucket: string, limits: BucketLimits, log: StoreLog): Promise<void> {
  const stream = kvStream(bucket);
  const si = await jsm.streams.info(stream);
  const c = si.config;
  const plan = planBucketLimits(
    bucket,
    { max_bytes: c.max_bytes, max_msg_size: c.max_msg_size, max_age: c.max_age, discard: c.discard, bytes: si.state.bytes },
    limits,
  );
  if (plan.kept) log.warn({ bucket, bytes: si.state.bytes, limit: limits.maxBytes }, plan.kept);
  if (Object.keys(plan.changes).length === 0) return;
  // The server refuses a max age shorter than the de-duplication window ("duplicates window can not be larger than max age").
  const changes: Partial<typeof c> = { ...plan.changes };
  if (changes.max_age && c.duplicate_window > changes.max_age) changes.duplicate_window = changes.max_age;
  try {
    await jsm.streams.update(stream, changes);
  } catch (e) {
    if (isJetStreamGap(e)) throw e;
    log.warn(
      { bucket, err: e },
      `could not bring the limits of the mesh's store bucket ${bucket} up to date (${errorMessage(e)}); it works as it is, and an identity that may update streams (the operator's, which meshctl up uses) does it when it opens the store`,
    );
    return;
  }
  log.info({ bucket, ...changes }, `the mesh's store bucket ${bucket}: limits brought up to date`);
}

/**
 * The audit trail (audit.ts): append-only, so made with `deny_delete` and `deny_purge` (no
 * identity, the operator's included, deletes a record or purges the stream through the API;
 * records leave only by age or, past `max_bytes`, oldest first). A retention asked for that
 * differs from the stream's is set with a stream update.
 */
async function ensureAuditStream(
  jsm: JetStreamManager,
  common: { retention: RetentionPolicy; num_replicas: number; storage: StorageType; duplicate_window: number },
  retentionMs: number | undefined,
  log: StoreLog,
): Promise<void> {
  const maxAge = (retentionMs ?? AUDIT_LIMITS.maxAgeMs) * 1_000_000;
  try {
    await ensureAudit(jsm, common, maxAge);
  } catch (e) {
    if (isJetStreamGap(e) || retentionMs !== undefined) throw e;
    // A store made by an older release, opened by a service whose identity may make no stream:
    // it runs, and refuses what it records until the operator opens the store (meshctl up, bootstrap, status).
    log.warn(
      { stream: Streams.audit, err: errorMessage(e) },
      `the audit trail (stream ${Streams.audit}) is not there and this identity may not make it (${errorMessage(e)}): requests that are recorded are refused until the operator's meshctl up, bootstrap or status opens the store, which makes it`,
    );
    return;
  }
  if (retentionMs === undefined) return;
  const si = await jsm.streams.info(Streams.audit);
  if (si.config.max_age === maxAge) return;
  await jsm.streams.update(Streams.audit, { max_age: maxAge, duplicate_window: Math.min(si.config.duplicate_window, maxAge) });
  log.info({ stream: Streams.audit, maxAgeMs: retentionMs }, `the audit trail ${Streams.audit} now keeps records for ${formatAge(retentionMs)}`);
}

/** Makes the audit stream unless it is there. */
async function ensureAudit(
  jsm: JetStreamManager,
  common: { retention: RetentionPolicy; num_replicas: number; storage: StorageType; duplicate_window: number },
  maxAge: number,
): Promise<void> {
  await ensureStream(jsm, {
    ...common,
    name: Streams.audit,
    subjects: [subjects.auditAll],
    max_age: maxAge,
    max_bytes: AUDIT_LIMITS.maxBytes,
    max_msg_size: AUDIT_LIMITS.maxRecordSize,
    discard: DiscardPolicy.Old,
    deny_delete: true,
    deny_purge: true,
    duplicate_window: Math.min(common.duplicate_window, maxAge),
  });
}

async function ensureStream(jsm: JetStreamManager, cfg: Parameters<JetStreamManager["streams"]["add"]>[0]): Promise<void> {
  try {
    await jsm.streams.info(cfg.name!);
  } catch (e) {
    // `status` is the HTTP-like code (404); `code` is JetStream's own (10059 stream not found).
    if (e instanceof JetStreamApiError && (e.status === 404 || e.code === 10059)) {
      try {
        await jsm.streams.add(cfg);
      } catch (e2) {
        // Another process created it first.
        if (!(e2 instanceof JetStreamApiError && (e2.status === 400 || e2.code === 10058))) throw e2;
      }
      return;
    }
    throw e;
  }
}
