/**
 * JSON records in KV buckets: reads that are never older than a write this process heard of,
 * and every read-modify-write through one compare-and-set that holds on a cluster.
 */
import { JetStreamApiError, type JetStreamClient } from "@nats-io/jetstream";
import type { KV, KvEntry } from "@nats-io/kv";
import type { z } from "zod";
import { ErrorCodes, MeshError } from "./errors.js";
import { storeWrite } from "./bucket-limits.js";
import { metRevision, noteRevision, revisionFloor } from "./read-floors.js";
import { backoffMs, sleep } from "./backoff.js";
import { retryJetStreamGap } from "./jetstream-retry.js";
import { RecordTooNewError, readableRecord, recordJson } from "./record-version.js";

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
 * heard of for the key (read-floors.ts): after waits from 10 ms, doubling, at most 200 ms, with
 * jitter, for at most {@link READ_FLOOR_WAIT_MS}; then a retryable `Unavailable` error, so a consumer's
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
      throw new MeshError(
        ErrorCodes.Unavailable,
        `the store's replicas of ${stream} answered ${key} at revision ${revision}, older than revision ${floor} already written; tried again later`,
        { retryable: true },
      );
    }
    await sleep(backoffMs(attempt, { firstMs: 10, maxMs: 200 }));
  }
}

/** What {@link readJson} throws for a record that does not match its schema (written by another version, say). */
export class RecordSchemaError extends MeshError {
  constructor(
    readonly key: string,
    detail: string | undefined,
  ) {
    super(ErrorCodes.Internal, `record ${key} does not match its schema: ${detail}`);
  }
}

/**
 * Reads and validates a JSON record; undefined when the key is missing or deleted. Never older
 * than a change of the key this process heard of (read-floors.ts). Throws {@link RecordSchemaError}
 * for a record that does not match `schema`.
 */
export async function readJson<T>(kv: KV, key: string, schema: z.ZodType<T>): Promise<Record_<T> | undefined> {
  const e = await getAtFloor(kv, key);
  if (!e || e.operation !== "PUT" || e.length === 0) return undefined;
  const parsed = schema.safeParse(entryJson(e));
  if (!parsed.success) throw new RecordSchemaError(key, parsed.error.issues[0]?.message);
  return { value: parsed.data, revision: e.revision };
}

/**
 * The parsed JSON of a record's entry, once its format is one this program reads
 * (record-version.ts): throws `RecordTooNewError`, naming `<bucket>/<key>`, for a newer one.
 * Every read of a record's JSON goes through here.
 */
export function entryJson(e: KvEntry): unknown {
  return readableRecord(e.json(), `${e.bucket}/${e.key}`);
}

/**
 * {@link entryJson} for a watch that goes on past a record it cannot take: undefined for one
 * that is not JSON, and for one of a newer format, which `refused` hears of (to say so).
 */
export function watchedJson(e: KvEntry, refused: (err: RecordTooNewError) => void): unknown {
  try {
    return entryJson(e);
  } catch (err) {
    if (err instanceof RecordTooNewError) refused(err);
    return undefined;
  }
}

/** {@link readJson}, with a record that does not match `schema` read as none: for a reader that shows what it can (the state says why). */
export async function readJsonIfValid<T>(kv: KV, key: string, schema: z.ZodType<T>): Promise<Record_<T> | undefined> {
  try {
    return await readJson(kv, key, schema);
  } catch (e) {
    if (e instanceof RecordSchemaError) return undefined;
    throw e;
  }
}

/** How many times {@link casModify} tries again after a compare-and-set conflict, by default. */
export const CAS_ATTEMPTS = 20;

/** How {@link casModify} reads, writes and retries. */
export interface CasModifyOptions<R> {
  /** Tries after a conflict before the conflict is thrown; default {@link CAS_ATTEMPTS}. */
  attempts?: number;
  /** The record as the caller holds it (`null`: missing): the first attempt starts from it without a read. */
  start?: R | null;
  /**
   * Whether `start` may be older than the store (a cache rather than a read just made): then
   * "nothing to write" is decided only over a fresh read. A write from a stale start fails its
   * compare-and-set and is tried again over a read in any case.
   */
  startMayBeStale?: boolean;
  /** Runs each write, for a caller that turns store errors into its own (a provider's). */
  around?: (write: () => Promise<number>) => Promise<number>;
}

/** What {@link casModify} did: wrote `value` at `revision`, or wrote nothing over `current`. */
export type CasModified<R, W> = { wrote: true; value: W; revision: number } | { wrote: false; current: R | undefined };

/**
 * The one read-modify-write of a KV record. `read` gets the record with its revision
 * (undefined when missing); `next` gets that and returns the value to store, or undefined to
 * write nothing. The value is written by compare-and-set over the revision read (created when
 * the record was missing, through {@link casWrite}); when another writer got there first, the
 * record is read again and `next` runs again, after a short random wait, at most `attempts`
 * times. `next` may therefore run more than once: it must be pure, or its effects idempotent.
 *
 * Every record of the mesh that is read, changed and written goes through here, and so
 * through {@link casUpdate}, which is what keeps it a compare-and-set on a cluster.
 */
export async function casModify<R extends { revision: number }, W>(
  kv: KV,
  key: string,
  read: () => Promise<R | undefined>,
  next: (current: R | undefined) => W | undefined | Promise<W | undefined>,
  opts: CasModifyOptions<R> = {},
): Promise<CasModified<R, W>> {
  const attempts = opts.attempts ?? CAS_ATTEMPTS;
  let fresh = opts.start === undefined || !opts.startMayBeStale;
  let cur = opts.start === undefined ? await read() : (opts.start ?? undefined);
  for (let attempt = 0; ; attempt++) {
    const value = await next(cur);
    if (value !== undefined) {
      const data = recordJson(value);
      try {
        const write = () => casWrite(kv, key, data, cur?.revision);
        return { wrote: true, value, revision: await (opts.around ? opts.around(write) : write()) };
      } catch (e) {
        if (!isCasConflict(e) || attempt >= attempts) throw e;
        // Several writers at one record: spread them out (a conflict over a stale start is no contest).
        if (fresh) await sleep(backoffMs(attempt + 1, { firstMs: 5, maxMs: 100, jitter: 1 }));
      }
    } else if (fresh) {
      return { wrote: false, current: cur };
    }
    cur = await read();
    fresh = true;
  }
}

/**
 * Writes `data` at `key` by compare-and-set over `revision` ({@link casUpdate}), or as a new
 * key when `revision` is undefined; rides out a JetStream gap, says so plainly when the bucket
 * is full (bucket-limits.ts), and notes the revision so that a later read in this process is
 * at least this new (read-floors.ts). Returns the new revision. A retried write whose first
 * try landed fails compare-and-set: the caller reads again.
 */
export async function casWrite(kv: KV, key: string, data: string, revision: number | undefined): Promise<number> {
  const written = await storeWrite(
    kv,
    key,
    () => retryJetStreamGap(() => (revision === undefined ? kv.create(key, data) : casUpdate(kv, key, data, revision))),
    {
      bytes: Buffer.byteLength(data),
    },
  );
  noteRevision(kv, key, written);
  return written;
}

/**
 * Read-modify-write of a JSON record validated by `schema`, through {@link casModify}. `fn`
 * gets the current value (undefined when missing) and returns the next one, or undefined to
 * write nothing; it must be pure. Returns what is stored in the end. With `read` (the record
 * as the caller just read it, `null` when it was missing) the first attempt starts from it
 * rather than reading the key again.
 */
export async function mutateJson<T>(
  kv: KV,
  key: string,
  schema: z.ZodType<T>,
  fn: (current: T | undefined) => T | undefined,
  opts: { attempts?: number; read?: Record_<T> | null } = {},
): Promise<T | undefined> {
  const out = await casModify(
    kv,
    key,
    () => readJson(kv, key, schema),
    (cur: Record_<T> | undefined) => fn(cur?.value),
    {
      ...(opts.attempts !== undefined ? { attempts: opts.attempts } : {}),
      ...(opts.read !== undefined ? { start: opts.read } : {}),
    },
  );
  return out.wrote ? out.value : out.current?.value;
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
  return new JetStreamApiError({
    code: 400,
    err_code: 10071,
    description: `wrong last sequence: another update of ${key} from revision ${revision} was stored first`,
  });
}

/**
 * Every value of a bucket matching `filter`, validated; with `skipInvalid`, a record that does
 * not match `schema` is left out rather than thrown ({@link readJsonIfValid}).
 */
export async function listJson<T>(
  kv: KV,
  schema: z.ZodType<T>,
  filter = ">",
  opts: { skipInvalid?: boolean } = {},
): Promise<Array<Record_<T> & { key: string }>> {
  const keys = await retryJetStreamGap(async () => {
    const found: string[] = [];
    for await (const k of await kv.keys(filter)) found.push(k);
    return found;
  });
  const out: Array<Record_<T> & { key: string }> = [];
  await Promise.all(
    keys.map(async (key) => {
      const r = await (opts.skipInvalid ? readJsonIfValid : readJson)(kv, key, schema);
      if (r) out.push({ ...r, key });
    }),
  );
  return out.sort((a, b) => a.key.localeCompare(b.key));
}
