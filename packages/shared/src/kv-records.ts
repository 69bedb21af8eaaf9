/**
 * JSON records in KV buckets: reads that are never older than a write this process heard of,
 * and every read-modify-write through one compare-and-set that holds on a cluster.
 */
import { JetStreamApiError, type JetStreamClient } from "@nats-io/jetstream";
import type { KV } from "@nats-io/kv";
import type { z } from "zod";
import { ErrorCodes, MeshError } from "./errors.js";
import { storeWrite } from "./bucket-limits.js";
import { metRevision, noteRevision, revisionFloor } from "./read-floors.js";
import { retryJetStreamGap } from "./jetstream-retry.js";

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
