/**
 * The application's side of a rotation, in order: a pool is built from the new generation and
 * proved with a query; it is swapped in, so new queries go to it; the old pool is ended once its
 * queries have finished; and only then is the rotation confirmed. The mesh retires the old
 * generation after every holder confirmed (docs/design.md, "Rotation protocol"), and for
 * PostgreSQL that ends the old login role's sessions: confirming any earlier would fail the
 * queries still running on the old pool.
 *
 * A new generation whose pool does not work is not confirmed: its pool is ended and built again
 * after a while, the old one serving meanwhile, and the rotation waits on this holder (`meshctl
 * status` names it) rather than retiring a credential the application still needs.
 */
import type { HeldCredential } from "@mesh/client";
import { PoolSwap, type Endable } from "./pool-swap.js";

/** What the follower needs of each item the SDK's holder yields. */
export type Held = Pick<HeldCredential, "generation" | "values" | "env" | "confirm">;

/** One step of following, for the application's log; never a value of the credential. */
export type FollowEvent =
  | { event: "in-use"; generation: number }
  | { event: "check-failed"; generation: number; attempt: number; error: string }
  | { event: "checked"; generation: number }
  | { event: "old-pool-ended"; generation: number; now: number }
  | { event: "confirming"; generation: number }
  | { event: "confirmed"; generation: number };

export interface FollowOptions<P extends Endable> {
  /** A pool built from one generation: its values (`host`, `port`, `database`, `username`, `password`), or the variables its requirement's `env` names. */
  open(credential: Pick<Held, "values" | "env">): P;
  /** Proves that `pool`, built from `values`, works; throws when it does not. */
  check(pool: P, values: Held["values"]): Promise<void>;
  /** Told of each step. */
  onEvent?(e: FollowEvent): void;
  /** How long to wait before building a pool again after attempt `attempt` failed its check; default 0.5 s doubling up to 10 s. */
  retryMs?(attempt: number): number;
}

/** A followed credential: the pool swap queries go through, and the iteration of later generations. */
export interface Following<P extends Endable> {
  pools: PoolSwap<P>;
  /** Settles when the holder's iteration ends (it was stopped, or the grant was taken back). */
  done: Promise<void>;
}

/**
 * Takes the first generation `held` yields as the pool in use (resolving once it works), then
 * moves to each later one in the order the file comment gives. Rejects when the iteration ends
 * before a first generation arrives.
 */
export async function followCredential<P extends Endable>(held: AsyncIterable<Held>, opts: FollowOptions<P>): Promise<Following<P>> {
  const items = held[Symbol.asyncIterator]();
  const first = await items.next();
  if (first.done) throw new Error("the holder stopped before it held a generation");
  const pools = new PoolSwap<P>({ pool: await openChecked(first.value, opts), generation: first.value.generation });
  opts.onEvent?.({ event: "in-use", generation: first.value.generation });
  // The generation held at start confirms nothing (a no-op), unless it came from a rotation this instance joined.
  await first.value.confirm();
  const done = (async () => {
    for (let next = await items.next(); !next.done; next = await items.next()) await moveTo(next.value, pools, opts);
  })();
  return { pools, done };
}

/** Moves `pools` to the generation of `h` (one it already uses is confirmed as it is). */
async function moveTo<P extends Endable>(h: Held, pools: PoolSwap<P>, opts: FollowOptions<P>): Promise<void> {
  if (h.generation > pools.inUse.generation) {
    const pool = await openChecked(h, opts);
    opts.onEvent?.({ event: "checked", generation: h.generation });
    const old = pools.inUse.generation;
    await pools.swap({ pool, generation: h.generation });
    opts.onEvent?.({ event: "old-pool-ended", generation: old, now: h.generation });
  }
  opts.onEvent?.({ event: "confirming", generation: h.generation });
  await h.confirm();
  opts.onEvent?.({ event: "confirmed", generation: h.generation });
}

/** A pool of `h`'s generation that passed its check; built again until one does. */
async function openChecked<P extends Endable>(h: Held, opts: FollowOptions<P>): Promise<P> {
  for (let attempt = 1; ; attempt++) {
    const pool = opts.open(h);
    try {
      await opts.check(pool, h.values);
      return pool;
    } catch (e) {
      await pool.end().catch(() => undefined);
      opts.onEvent?.({ event: "check-failed", generation: h.generation, attempt, error: e instanceof Error ? e.message : String(e) });
      await new Promise((r) => setTimeout(r, (opts.retryMs ?? defaultRetryMs)(attempt)));
    }
  }
}

const defaultRetryMs = (attempt: number) => Math.min(500 * 2 ** (attempt - 1), 10_000);
