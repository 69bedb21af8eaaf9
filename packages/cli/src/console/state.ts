/**
 * The console's live copy of the mesh's state: each bucket it shows (snapshot.ts) is
 * listed once with the same reader the other commands use (`listJson`), then followed by a KV
 * watch started before the listing, so no change falls between them. Listeners hear of every
 * change. The credentials bucket is not among them, and the store handed on has no way to it.
 */
import type { KvEntry } from "@nats-io/kv";
import { Grant, RecordTooNewError } from "@mesh/shared";
import { entryJson, listJson, retryJetStreamGap, watchedJson, type KV, type Store } from "@mesh/shared/runtime";
import { CONSOLE_BUCKETS, applyChange, emptySnapshot, type ConsoleBucket, type ConsoleSnapshot } from "./snapshot.js";

/**
 * The store without its credentials bucket: reaching for it throws, so no code the console
 * calls can read a credential, even by mistake.
 */
export function withoutCredentials(store: Store): Store {
  const kv = { ...store.kv };
  Object.defineProperty(kv, "credentials", {
    enumerable: false,
    get() {
      throw new Error("meshctl console never reads mesh-credentials: no secret value may reach a page");
    },
  });
  return { ...store, kv };
}

/** What one change touched: a record of a bucket. */
export interface ConsoleChange {
  bucket: ConsoleBucket;
  key: string;
}

/** A running copy; `version` grows with every change. */
export interface ConsoleState {
  readonly snapshot: ConsoleSnapshot;
  readonly version: number;
  /** The store the pages read more from (a grant's history): without credentials. */
  readonly store: Store;
  /** Calls `fn` after each change, with what changed; returns what stops calling it. */
  onChange(fn: (version: number, change: ConsoleChange) => void): () => void;
  /** Ends the watches. */
  stop(): void;
  /** Resolves when a watch ends (the connection closed). */
  readonly closed: Promise<void>;
}

/** A grant record's revisions, oldest first: generation and when it was written. */
export async function grantHistory(store: Store, key: string): Promise<Array<{ generation: number; at: string }>> {
  const out: Array<{ generation: number; at: string }> = [];
  const iter = await retryJetStreamGap(() => store.kv.grants.history({ key }));
  for await (const e of iter) {
    if (e.operation !== "PUT" || e.length === 0) continue;
    const g = Grant.safeParse(safeJson(e));
    if (g.success) out.push({ generation: g.data.generation, at: e.created.toISOString() });
  }
  return out;
}

/** The entry's record, or undefined for one that is not JSON; a record of a newer format is refused (thrown), not left out. */
function safeJson(e: KvEntry): unknown {
  try {
    return entryJson(e);
  } catch (err) {
    if (err instanceof RecordTooNewError) throw err;
    return undefined;
  }
}

type Watch = Awaited<ReturnType<KV["watch"]>>;

/** Lists and follows every bucket the console shows. Resolves once the first picture is complete. */
export async function startConsoleState(full: Store): Promise<ConsoleState> {
  const store = withoutCredentials(full);
  const snapshot = emptySnapshot();
  let version = 0;
  const listeners = new Set<(v: number, change: ConsoleChange) => void>();
  const changed = (change: ConsoleChange) => {
    version++;
    for (const fn of listeners) fn(version, change);
  };
  const watches: Watch[] = [];
  const ended: Array<Promise<void>> = [];
  const buckets = Object.keys(CONSOLE_BUCKETS) as ConsoleBucket[];
  try {
    for (const bucket of buckets) {
      const kv = store.kv[bucket];
      const schema = CONSOLE_BUCKETS[bucket];
      // Updates only (nats.js's KvWatchInclude.UpdatesOnly), started before the listing: what the listing has already is skipped by revision.
      const watch = await retryJetStreamGap(() => kv.watch({ key: ">", include: "updates" }));
      watches.push(watch);
      const pending: Array<() => boolean> = [];
      let listed = false;
      const apply = (key: string, fn: () => boolean) => {
        if (!listed) pending.push(fn);
        else if (fn()) changed({ bucket, key });
      };
      ended.push(
        (async () => {
          for await (const e of watch) {
            if (e.operation !== "PUT" || e.length === 0) {
              apply(e.key, () => applyChange(snapshot, bucket, e.key, undefined, e.revision));
              continue;
            }
            // A record that does not parse, or of a newer format, is one a newer mesh wrote: the console shows what it can read
            // (its listing, on a reload, names it).
            const r = schema.safeParse(watchedJson(e, () => undefined));
            if (r.success) apply(e.key, () => applyChange(snapshot, bucket, e.key, r.data as never, e.revision));
          }
        })().catch(() => undefined),
      );
      for (const rec of await listJson(kv, schema as never)) applyChange(snapshot, bucket, rec.key, rec.value as never, rec.revision);
      listed = true;
      for (const fn of pending.splice(0)) fn();
    }
  } catch (e) {
    for (const w of watches) w.stop();
    throw e;
  }
  return {
    snapshot,
    get version() {
      return version;
    },
    store,
    onChange(fn) {
      listeners.add(fn);
      return () => listeners.delete(fn);
    },
    stop() {
      for (const w of watches) w.stop();
    },
    closed: Promise.race(ended).then(() => undefined),
  };
}
