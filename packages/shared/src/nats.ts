/**
 * NATS and JetStream plumbing shared by every process: connecting, the store (KV buckets and
 * streams), JSON records with compare-and-set, and level-triggered consumption of changes.
 */
import { existsSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { connect, credsAuthenticator, usernamePasswordAuthenticator, type NatsConnection, type ConnectionOptions } from "@nats-io/transport-node";
import {
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
import type { z } from "zod";
import { Buckets, Streams, subjects, type BucketName } from "./subjects.js";
import { isInboxSubject } from "./inboxes.js";
import { ErrorCodes, MeshError, errorMessage } from "./errors.js";
import { BUCKET_LIMITS, Limits, type BucketLimits } from "./limits.js";
import { createLogger, type Logger } from "./logger.js";
import { planBucketLimits, storeWrite } from "./bucket-limits.js";
import { metRevision, noteRevision, revisionFloor } from "./read-floors.js";

export type { NatsConnection, KV, JetStreamClient, JetStreamManager, JsMsg };

export const DEFAULT_NATS_URL = "nats://127.0.0.1:4222";

/**
 * The NATS identity a process connects with, from its environment:
 *
 * - `MESH_NATS_CREDENTIALS`: a standard decorated `.creds` file (a user JWT and its nkey
 *   seed), or the binding directory of a `nats.user` grant as the agent writes it (its `creds`
 *   file; `username` and `password` on a server with plain users). Read again on every connect
 *   and reconnect, so after a rotation the process comes back with the new generation.
 * - `MESH_NATS_USER` with `MESH_NATS_PASSWORD_FILE` (or `MESH_NATS_PASSWORD`): a fixed user and
 *   password, for a server with plain users.
 * - neither: no credentials (a server without authentication).
 *
 * The connection's inbox prefix is the binding's `inboxPrefix` (the only inbox its identity may
 * subscribe to, inboxes.ts), or `MESH_NATS_INBOX_PREFIX` for an identity given as a `.creds` file.
 */
export function natsIdentity(env: NodeJS.ProcessEnv = process.env): Partial<ConnectionOptions> {
  const path = env.MESH_NATS_CREDENTIALS;
  const inbox = (prefix: string | undefined): Partial<ConnectionOptions> => (prefix ? { inboxPrefix: prefix } : {});
  if (path) {
    const fail = (what: string, e: unknown) =>
      new MeshError(
        ErrorCodes.ProviderMisconfigured,
        `MESH_NATS_CREDENTIALS=${path}: cannot read ${what} (${(e as NodeJS.ErrnoException).code ?? errorMessage(e)}); it must be a .creds file, or the binding directory of a nats.user grant written by this node's agent`,
        { cause: e },
      );
    let isDir: boolean;
    try {
      isDir = statSync(path).isDirectory();
    } catch (e) {
      throw fail("it", e);
    }
    const prefixFile = join(path, "inboxPrefix");
    const prefix = env.MESH_NATS_INBOX_PREFIX || (isDir && existsSync(prefixFile) ? readFileSync(prefixFile, "utf8").trim() : undefined);
    const credsFile = isDir ? join(path, "creds") : path;
    if (!isDir || existsSync(credsFile)) {
      const read = () => {
        try {
          return readFileSync(credsFile);
        } catch (e) {
          throw fail(credsFile, e);
        }
      };
      // Fail at start, with the message above, rather than inside a reconnect.
      if (!/-----BEGIN NATS USER JWT-----/.test(read().toString("utf8"))) throw fail(credsFile, new Error("it holds no user JWT"));
      return { authenticator: credsAuthenticator(() => read()), ...inbox(prefix) };
    }
    const read = (key: string) => () => {
      try {
        return readFileSync(join(path, key), "utf8").trim();
      } catch (e) {
        throw fail(key, e);
      }
    };
    read("username")();
    return { authenticator: usernamePasswordAuthenticator(read("username"), read("password")), ...inbox(prefix) };
  }
  const user = env.MESH_NATS_USER;
  if (!user) return {};
  let pass = env.MESH_NATS_PASSWORD;
  if (env.MESH_NATS_PASSWORD_FILE) {
    try {
      pass = readFileSync(env.MESH_NATS_PASSWORD_FILE, "utf8").trim();
    } catch (e) {
      throw new MeshError(
        ErrorCodes.ProviderMisconfigured,
        `MESH_NATS_PASSWORD_FILE=${env.MESH_NATS_PASSWORD_FILE}: cannot read it (${(e as NodeJS.ErrnoException).code ?? errorMessage(e)}); make it readable by this process`,
        { cause: e },
      );
    }
  }
  return { user, ...(pass !== undefined ? { pass } : {}), ...inbox(env.MESH_NATS_INBOX_PREFIX) };
}

/**
 * Connects to NATS with unlimited reconnects, as the identity {@link natsIdentity} finds in the
 * environment (unless `opts` says otherwise); the error says which URL failed and what to check.
 */
export async function connectNats(url: string = process.env.NATS_URL || DEFAULT_NATS_URL, opts: Partial<ConnectionOptions> = {}): Promise<NatsConnection> {
  const identity = natsIdentity();
  try {
    // ignoreAuthErrorAbort: a refused identity is tried again (the agent may be writing the
    // binding that holds the new one) rather than the client giving up after two refusals.
    // noAsyncTraces: the client otherwise builds two Errors with stack traces for every request
    // (5 % of the verifier's CPU in a profile of a pass over 1,000 grants, bench/verify.bench.ts);
    // the mesh's errors say what failed in their message.
    return await connect({ servers: url.split(","), maxReconnectAttempts: -1, reconnectTimeWait: 500, ignoreAuthErrorAbort: true, noAsyncTraces: true, ...identity, ...opts });
  } catch (e) {
    if (/authorization violation|authentication/i.test(errorMessage(e))) {
      throw new MeshError(
        ErrorCodes.ProviderMisconfigured,
        `NATS at ${url} refused this process's identity (${errorMessage(e)}): check MESH_NATS_CREDENTIALS (a .creds file, or a nats.user binding), or MESH_NATS_USER and its password, against the identities the server knows`,
        { cause: e },
      );
    }
    throw new MeshError(
      ErrorCodes.ProviderUnreachable,
      `cannot connect to NATS at ${url}: ${errorMessage(e)}. Start a nats-server with JetStream (nats-server -js) or set NATS_URL.`,
      { cause: e, retryable: true },
    );
  }
}

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

/** How {@link openStore} makes the store. */
export interface OpenStoreOptions {
  /** 1 on one server, 3 on a cluster; default {@link storeReplicas}. */
  replicas?: number;
  /** Where it says what it changed of an existing bucket's limits, and what it kept; default a logger of its own. */
  log?: StoreLog;
  /** Limits other than limits.ts's `BUCKET_LIMITS`, per bucket, for the buckets this call makes or brings up to them (a store sized otherwise; a test's bucket that fills up). */
  bucketLimits?: Partial<Record<keyof typeof Buckets, Partial<BucketLimits>>>;
}

/**
 * Opens the store, creating buckets and streams that do not exist yet, and bringing the limits
 * of buckets that do up to `BUCKET_LIMITS` (bucket-limits.ts says how, and that it loses
 * nothing); safe to call from every process at once.
 */
export async function openStore(nc: NatsConnection, opts: OpenStoreOptions = {}): Promise<Store> {
  const replicas = opts.replicas ?? storeReplicas(nc.info, process.env);
  return retryJetStreamGap(() => openStoreOnce(nc, replicas, opts), 20_000);
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
    if (!Number.isInteger(n) || n < 1 || n > 5) throw new MeshError(ErrorCodes.InvalidRequest, `MESH_REPLICAS=${named} is not a whole number from 1 to 5: set 1 for one NATS server, 3 for a cluster of three`);
    return n;
  }
  return info?.cluster && (info.connect_urls?.length ?? 0) >= 3 ? 3 : 1;
}

/** Whether `e` says that JetStream did not answer for now, rather than that it is missing for good. */
export function isJetStreamGap(e: unknown): boolean {
  // 2.9.10 says it both ways during a reload: "jetstream is not enabled", "JetStream not enabled for account".
  return /no responders|jetstream (is )?not enabled/i.test(errorMessage(e));
}

/**
 * Whether `e` (or one of its causes) is a JetStream request, KV read or watch that got no answer
 * in time. On a cluster that is what a server lost or restarting looks like while the others
 * elect a leader of the meta group or of a stream (5–10 s seen here on 2.9.10); on one server,
 * an overloaded or stuck server. Safe to try again only for what changes nothing (a read, a watch).
 */
export function isJetStreamTimeout(e: unknown): boolean {
  for (let cur = e, i = 0; cur && i < 8; cur = (cur as { cause?: unknown }).cause, i++) {
    if (cur instanceof Error && (cur.name === "TimeoutError" || /^timeout$/i.test(cur.message))) return true;
  }
  return false;
}

/** What to tell a user whose `what` met {@link isJetStreamTimeout} (at `url`): what happened, and what to do about it. */
export function jetStreamTimeoutMessage(what: string, url?: string): string {
  return (
    `${what}: JetStream${url ? ` at ${url}` : ""} did not answer in time. On a cluster this is a server lost or restarting while the others ` +
    `elect new leaders, which passes by itself within about 10 s while most servers run. Try again in a few seconds; if it goes on, ` +
    `check that a majority of the cluster's servers are running (each one's /healthz on its monitoring port).`
  );
}

/**
 * Runs `fn`, a read or a watch that changes nothing, again while JetStream does not answer:
 * no responders ({@link isJetStreamGap}) or no answer in time ({@link isJetStreamTimeout}),
 * until `withinMs` has passed; then throws the last error.
 */
export function retryJetStreamRead<T>(fn: () => Promise<T>, withinMs = JETSTREAM_GAP_RIDE_OUT_MS): Promise<T> {
  return retryWhile(fn, (e) => isJetStreamGap(e) || isJetStreamTimeout(e), withinMs);
}

/**
 * How long {@link retryJetStreamGap} rides out a JetStream that does not answer, by default.
 * Longer than the gaps seen here (a config reload's ~100 ms, reloads in quick succession that
 * kept it quiet for more than 1.5 s, and over 4.5 s of them on a loaded machine; a cluster's
 * leader election, about 5 s), shorter than a client's 30 s deadline, so a request handler
 * that still meets the gap answers with a retryable error while its caller is still waiting.
 */
export const JETSTREAM_GAP_RIDE_OUT_MS = 10_000;

/**
 * Runs `fn`, again while JetStream does not answer ({@link isJetStreamGap}): its API has no
 * responders whenever the server reloads its config (every nats.user change, measured on
 * 2.9.10), and while a cluster elects a leader. Waits 100 ms more before each try, at most
 * 500 ms; gives up with the last error once `withinMs` (default {@link JETSTREAM_GAP_RIDE_OUT_MS})
 * has passed. Any other error is thrown at once.
 */
export function retryJetStreamGap<T>(fn: () => Promise<T>, withinMs = JETSTREAM_GAP_RIDE_OUT_MS): Promise<T> {
  return retryWhile(fn, isJetStreamGap, withinMs);
}

/** Runs `fn` again while it fails with what `again` accepts, 100 ms more between tries (at most 500 ms), until `withinMs` has passed. */
async function retryWhile<T>(fn: () => Promise<T>, again: (e: unknown) => boolean, withinMs: number): Promise<T> {
  const end = Date.now() + withinMs;
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn();
    } catch (e) {
      const left = end - Date.now();
      if (left <= 0 || !again(e)) throw e;
      await new Promise((r) => setTimeout(r, Math.min(100 * attempt, 500, left)));
    }
  }
}

async function openStoreOnce(nc: NatsConnection, replicas: number, opts: OpenStoreOptions): Promise<Store> {
  const jsm = await jetstreamManager(nc, { timeout: 10_000 }).catch((e: unknown) => {
    throw new MeshError(
      ErrorCodes.ProviderUnreachable,
      `the NATS server at ${nc.getServer()} has no JetStream: start it with -js (see deploy/nats/single.conf). ${errorMessage(e)}`,
      { cause: e },
    );
  });
  const js = jetstream(nc, { timeout: 10_000 });
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
    await ensureBucketLimits(jsm, bucket, limits, (log ??= createLogger("store")));
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
  const plan = planBucketLimits(bucket, { max_bytes: c.max_bytes, max_msg_size: c.max_msg_size, max_age: c.max_age, discard: c.discard, bytes: si.state.bytes }, limits);
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

/** True when a KV write failed because the revision moved (compare-and-set conflict). */
export function isCasConflict(e: unknown): boolean {
  return e instanceof JetStreamApiError && (e.code === 10071 || /wrong last sequence/.test(e.message));
}

/** A JSON record read from KV, with the revision to update it against. */
export interface Record_<T> {
  value: T;
  revision: number;
}

/** How long a read waits for a replica that has the revision an event announced (read-floors.ts) before it fails, retryable. */
export const READ_FLOOR_WAIT_MS = 5_000;

/**
 * `kv.get(key)`, again while the replica that answers is behind the revision this process
 * heard of for the key (read-floors.ts): 10 ms more before each try, at most 200 ms, for at
 * most {@link READ_FLOOR_WAIT_MS}; then a retryable `Unavailable` error, so a consumer's
 * message comes back later rather than being acknowledged on a stale read.
 */
/** The stream of a KV bucket (`KV_<bucket>`). */
const streamOf = (kv: KV) => (kv as { bucketName?: () => string }).bucketName?.() ?? "";

export async function getAtFloor(kv: KV, key: string) {
  const stream = streamOf(kv);
  const floor = revisionFloor(kv, key);
  const end = Date.now() + READ_FLOOR_WAIT_MS;
  for (let attempt = 1; ; attempt++) {
    const e = await retryJetStreamGap(() => kv.get(key));
    const revision = e?.revision ?? 0;
    if (revision >= floor) {
      if (floor > 0) metRevision(kv, key, revision);
      return e;
    }
    if (Date.now() > end) {
      throw new MeshError(ErrorCodes.Unavailable, `the store's replicas of ${stream} answered ${key} at revision ${revision}, older than revision ${floor} already written; tried again later`, { retryable: true });
    }
    await new Promise((r) => setTimeout(r, Math.min(10 * attempt, 200)));
  }
}

/** Reads and validates a JSON record; undefined when the key is missing or deleted. Never older than a change of the key this process heard of (read-floors.ts). */
export async function readJson<T>(kv: KV, key: string, schema: z.ZodType<T>): Promise<Record_<T> | undefined> {
  const e = await getAtFloor(kv, key);
  if (!e || e.operation !== "PUT" || e.length === 0) return undefined;
  const parsed = schema.safeParse(e.json());
  if (!parsed.success) {
    throw new MeshError(ErrorCodes.Internal, `record ${key} does not match its schema: ${parsed.error.issues[0]?.message}`);
  }
  return { value: parsed.data, revision: e.revision };
}

/**
 * Read-modify-write with compare-and-set. `fn` gets the current value (undefined when
 * missing) and returns the next one, or undefined to write nothing. Conflicts are retried
 * with a fresh read; `fn` must therefore be pure. Returns what is stored in the end. With
 * `read` (the record as the caller just read it, `null` when it was missing) the first attempt
 * starts from it rather than reading the key again.
 */
export async function mutateJson<T>(
  kv: KV,
  key: string,
  schema: z.ZodType<T>,
  fn: (current: T | undefined) => T | undefined,
  opts: { attempts?: number; read?: Record_<T> | null } = {},
): Promise<T | undefined> {
  const attempts = opts.attempts ?? 20;
  for (let i = 0; ; i++) {
    // The caller's own read of the key, when it just made one, saves the first round trip; a conflict reads again.
    const cur = i === 0 && opts.read !== undefined ? (opts.read ?? undefined) : await readJson(kv, key, schema);
    const next = fn(cur?.value);
    if (next === undefined) return cur?.value;
    const data = JSON.stringify(next);
    try {
      // A retried write whose first try landed fails compare-and-set, and is read again below.
      const revision = await storeWrite(kv, key, () => retryJetStreamGap(() => (cur ? casUpdate(kv, key, data, cur.revision) : kv.create(key, data))), { bytes: Buffer.byteLength(data) });
      // Read-your-writes: a later read of the key in this process is at least this new (read-floors.ts).
      noteRevision(kv, key, revision);
      return next;
    } catch (e) {
      if (!isCasConflict(e) || i >= attempts) throw e;
      await new Promise((r) => setTimeout(r, Math.random() * 5 * (i + 1)));
    }
  }
}

/**
 * `kv.update(key, data, revision)` that stays a compare-and-set on a cluster of nats-server
 * 2.9.10, which checks an update's expected revision (`Nats-Expected-Last-Subject-Sequence` >
 * 0) only on the stream leader *before* proposing it, against the messages it has applied,
 * and not again when applying (server/stream.go, processJetStreamMsg: "If we are clustered we
 * have prechecked seq > 0"; fixed in 2.11 by nats-io/nats-server 469f834). Two updates of one
 * key from the same revision, proposed within the milliseconds before the first is applied,
 * were then both stored, the later silently overwriting the earlier: seen here on three
 * servers as a grant whose folded-in holders vanished, and as a generation that went 5, 4, 5.
 *
 * The update also carries `Nats-Msg-Id: <key>@<revision>`. The stream's de-duplication is
 * checked when a message is applied, on every server alike, so of two updates from one
 * revision only the first is stored; the second is acknowledged as a duplicate, which is
 * turned into the same compare-and-set conflict (10071) a stale revision gets, and the caller
 * reads again. (Revisions only grow, so the id never repeats for another write; a create,
 * expecting revision 0, is checked when applied already and needs no id.) Returns the new
 * revision. On one server the id changes nothing (it checks the revision when applying); the
 * server keeps each id for the bucket's duplicate window (2 minutes).
 */
export async function casUpdate(kv: KV, key: string, data: string | Uint8Array, revision: number): Promise<number> {
  const b = kv as unknown as { js?: JetStreamClient; subjectForKey?: (k: string, edit?: boolean) => string };
  if (!b.js || !b.subjectForKey) return kv.update(key, data, revision);
  const ack = await b.js.publish(b.subjectForKey(key, true), data, { msgID: `${key}@${revision}`, expect: { lastSubjectSequence: revision } });
  if (ack.duplicate) throw casRaced(key, revision);
  return ack.seq;
}

/** What {@link casUpdate} throws when another update from the same revision got there first: a compare-and-set conflict (isCasConflict). */
function casRaced(key: string, revision: number): JetStreamApiError {
  return new JetStreamApiError({ code: 400, err_code: 10071, description: `wrong last sequence: another update of ${key} from revision ${revision} was stored first` });
}

/** Every value of a bucket matching `filter`, validated. */
export async function listJson<T>(kv: KV, schema: z.ZodType<T>, filter = ">"): Promise<Array<Record_<T> & { key: string }>> {
  const keys = await retryJetStreamGap(async () => {
    const found: string[] = [];
    for await (const k of await kv.keys(filter)) found.push(k);
    return found;
  });
  const out: Array<Record_<T> & { key: string }> = [];
  await Promise.all(
    keys.map(async (key) => {
      const r = await readJson(kv, key, schema);
      if (r) out.push({ ...r, key });
    }),
  );
  return out.sort((a, b) => a.key.localeCompare(b.key));
}

/** A running consumption; `stop()` ends it, `closed` settles when it has ended. */
export interface Consumption {
  stop(): Promise<void>;
  closed: Promise<void>;
}

/** The key of a KV change message: the part of the subject after `$KV.<bucket>.`. */
export function kvKeyOf(bucket: string): (subject: string) => string | undefined {
  const prefix = `$KV.${bucket}.`;
  return (subject) => (subject.startsWith(prefix) ? subject.slice(prefix.length) : undefined);
}

/** The JetStream stream that backs a KV bucket. */
export function kvStream(bucket: string): string {
  return `KV_${bucket}`;
}

/** The subject filter of every key of a KV bucket, or of the keys matching `keyFilter`. */
export function kvFilter(bucket: string, keyFilter = ">"): string {
  return `$KV.${bucket}.${keyFilter}`;
}

/**
 * Answers requests on `subject` in a queue group with JSON; a handler that throws gets a
 * structured error reply (`{ok:false, error:{code,message,retryable}}`), never a timeout.
 * At most `maxInFlight` requests (default {@link Limits.requestsInFlight}) are worked on at
 * once; one more is answered at once with a retryable `Unavailable`, so a flood costs the
 * service a bounded amount of memory and its callers a retry, not a timeout.
 */
export function serveJson(
  nc: NatsConnection,
  subject: string,
  queue: string,
  log: Logger,
  handler: (body: unknown, msg: { subject: string; headers?: import("@nats-io/transport-node").MsgHdrs }) => Promise<unknown>,
  opts: { maxInFlight?: number } = {},
): { stop(): Promise<void> } {
  const maxInFlight = opts.maxInFlight ?? Limits.requestsInFlight;
  const busy = JSON.stringify({
    ok: false,
    error: { code: ErrorCodes.Unavailable, message: `this instance is working on ${maxInFlight} requests on ${subject} already; try again`, retryable: true },
  });
  let inFlight = 0;
  let shed = 0;
  const sub = nc.subscribe(subject, { queue });
  void (async () => {
    for await (const m of sub) {
      // An answer goes only to an inbox: this identity may answer once whatever a request's reply
      // names, so a reply naming another holder's $JS.ACK… would have it acknowledge for the sender.
      if (m.reply && !isInboxSubject(m.reply)) {
        log.warn({ subject }, "a request whose reply subject is not an inbox was dropped unanswered");
        continue;
      }
      if (inFlight >= maxInFlight) {
        m.respond(busy);
        // Logged once per burst, not once per refused request.
        if (shed++ === 0) log.warn({ subject, maxInFlight }, "too many requests in flight: answering busy until some finish");
        continue;
      }
      if (shed > 0) {
        log.info({ subject, shed }, "requests in flight below the limit again");
        shed = 0;
      }
      inFlight++;
      void (async () => {
        let body: unknown;
        try {
          body = m.data.length ? m.json() : {};
        } catch {
          m.respond(JSON.stringify({ ok: false, error: { code: ErrorCodes.InvalidRequest, message: "the request body is not JSON", retryable: false } }));
          return;
        }
        try {
          const reply = await handler(body, { subject: m.subject, headers: m.headers });
          m.respond(JSON.stringify(reply));
        } catch (e) {
          const err = e instanceof MeshError ? e.toJSON() : { code: ErrorCodes.Internal, message: errorMessage(e), retryable: true };
          if (!(e instanceof MeshError)) log.error({ err: e, subject }, "request handler failed");
          m.respond(JSON.stringify({ ok: false, error: err }));
        }
      })().finally(() => inFlight--);
    }
  })();
  return { stop: () => sub.drain() };
}
