/**
 * The rotation records (KV `mesh-rotations`) as this rotator reads and writes them, with the
 * last decoded value of each kept beside its revision. A record names every holder with its
 * progress (about 42 KB at 1,000 holders) and is read on every confirmation batch and every
 * step; a read whose revision is the one this instance last read or wrote skips the JSON and
 * schema parsing, which was most of the rotator's CPU on the confirmation path. The store stays
 * the source of record: every read asks KV for the current revision, and every write is a
 * compare-and-set on a revision. Values handed out are shared: never mutate them.
 */
import { ErrorCodes, MeshError, Rotation, recordJson } from "@mesh/shared";
import { casModify, casWrite, entryJson, retryJetStreamGap, type Store } from "@mesh/shared/runtime";

/** A rotation record at a revision. */
export interface RotationRecord {
  value: Rotation;
  revision: number;
}

/** How many decoded records are kept (the most recently used grants). */
const KEEP = 64;
/** Compare-and-set attempts of one update before its conflict is thrown. */
const ATTEMPTS = 20;

export class RotationRecords {
  private readonly decoded = new Map<string, RotationRecord>();
  /** The last revision of each key this instance wrote itself (newest {@link KEEP} keys). */
  private readonly written = new Map<string, number>();
  /** The last update of each key in work, so the next waits for it. */
  private readonly chains = new Map<string, Promise<void>>();

  constructor(private readonly store: Store) {}

  /** The record of a grant key as stored now; undefined when there is none. */
  async read(key: string): Promise<RotationRecord | undefined> {
    const e = await retryJetStreamGap(() => this.store.kv.rotations.get(key));
    if (!e || e.operation !== "PUT" || e.length === 0) {
      this.decoded.delete(key);
      return undefined;
    }
    const hit = this.decoded.get(key);
    if (hit?.revision === e.revision) return this.keep(key, hit);
    const parsed = Rotation.safeParse(entryJson(e));
    if (!parsed.success) throw new MeshError(ErrorCodes.Internal, `record ${key} does not match its schema: ${parsed.error.issues[0]?.message}`);
    return this.keep(key, { value: parsed.data, revision: e.revision });
  }

  /** Whether `revision` of `key` is one this instance wrote itself (the last it wrote). */
  wroteRevision(key: string, revision: number): boolean {
    return this.written.get(key) === revision;
  }

  /** The record as this instance last read or wrote it, without asking the store: it may be stale, so a hint only. */
  last(key: string): RotationRecord | undefined {
    return this.decoded.get(key);
  }

  /**
   * Applies `fn` to the record of `key` and writes what it returns by compare-and-set (nothing
   * when it returns undefined or the record itself); returns what is stored then and whether
   * `fn`'s result was written. `fn` must be pure: it may run more than once.
   *
   * The updates of one key by this instance run one at a time, each first over the record as
   * this instance last read or wrote it, without a read (the write's revision check proves it
   * current); so confirmation batches and state changes follow each other instead of failing
   * each other's compare-and-set with a 42 KB write each. After a conflict (another instance
   * wrote), and before deciding to write nothing, `fn` runs again over a fresh read.
   */
  update(key: string, fn: (r: Rotation | undefined) => Rotation | undefined): Promise<{ record: RotationRecord | undefined; wrote: boolean }> {
    const run = (this.chains.get(key) ?? Promise.resolve()).then(() => this.updateNow(key, fn));
    const tail = run.then(
      () => undefined,
      () => undefined,
    );
    this.chains.set(key, tail);
    void tail.then(() => {
      if (this.chains.get(key) === tail) this.chains.delete(key);
    });
    return run;
  }

  private async updateNow(key: string, fn: (r: Rotation | undefined) => Rotation | undefined): Promise<{ record: RotationRecord | undefined; wrote: boolean }> {
    const last = this.decoded.get(key);
    const out = await casModify(
      this.store.kv.rotations,
      key,
      () => this.read(key),
      (at: RotationRecord | undefined) => {
        const next = fn(at?.value);
        return next === at?.value ? undefined : next;
      },
      { attempts: ATTEMPTS, ...(last ? { start: last, startMayBeStale: true } : {}) },
    );
    return out.wrote ? { record: this.wrote(key, out.value, out.revision), wrote: true } : { record: out.current, wrote: false };
  }

  /** Writes `next` over `revision` (creates it when undefined); fails with a CAS conflict when the record moved on. */
  async write(key: string, revision: number | undefined, next: Rotation): Promise<RotationRecord> {
    return this.wrote(key, next, await casWrite(this.store.kv.rotations, key, recordJson(next), revision));
  }

  /** Keeps `value`, which this instance wrote at `revision`. */
  private wrote(key: string, value: Rotation, revision: number): RotationRecord {
    this.written.delete(key);
    this.written.set(key, revision);
    if (this.written.size > KEEP) this.written.delete(this.written.keys().next().value!);
    return this.keep(key, { value, revision });
  }

  private keep(key: string, r: RotationRecord): RotationRecord {
    // A read that answered before a write of this instance landed: keep the newer one (revisions only grow).
    if ((this.decoded.get(key)?.revision ?? 0) > r.revision) return r;
    this.decoded.delete(key);
    this.decoded.set(key, r);
    if (this.decoded.size > KEEP) this.decoded.delete(this.decoded.keys().next().value!);
    return r;
  }
}
