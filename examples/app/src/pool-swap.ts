/**
 * The pool an application's queries go to, swapped for another without a failed query: a new
 * query goes to the pool current when it starts, and a pool swapped out is ended only once the
 * queries it was running have finished. Ending it earlier would fail them; ending it never would
 * keep its sessions, on a credential the mesh retires once the application confirms.
 *
 * Generic over what it holds (a `pg.Pool` in the application, a plain object in its tests), so
 * the rule is tested without a database.
 */

/** What the swap needs of a pool: a way to end it once nothing runs on it. */
export interface Endable {
  end(): Promise<void>;
}

/** A pool in use, with the generation of the credential it was built from. */
export interface PoolInUse<P> {
  pool: P;
  generation: number;
}

/**
 * Holds the current pool and counts, per pool, the queries running on it. `use` runs one
 * query on the current pool; `swap` makes another current and ends the one it replaces once
 * its queries are done; `end` ends the current one the same way.
 */
export class PoolSwap<P extends Endable> {
  private current: PoolInUse<P>;
  private readonly running = new Map<P, { count: number; idle?: () => void }>();

  constructor(initial: PoolInUse<P>) {
    this.current = initial;
  }

  /** The pool new queries go to, and its generation. */
  get inUse(): PoolInUse<P> {
    return this.current;
  }

  /** Queries running on `pool` now. */
  runningOn(pool: P): number {
    return this.running.get(pool)?.count ?? 0;
  }

  /**
   * Runs `query` on the pool current now; the pool is not ended before it settles, whatever
   * is swapped in meanwhile. Resolves or rejects as `query` does, with the generation it ran on.
   */
  async use<T>(query: (inUse: PoolInUse<P>) => Promise<T>): Promise<{ result: T; generation: number }> {
    const inUse = this.current;
    const r = this.running.get(inUse.pool) ?? { count: 0 };
    this.running.set(inUse.pool, r);
    r.count++;
    try {
      return { result: await query(inUse), generation: inUse.generation };
    } finally {
      if (--r.count === 0) r.idle?.();
    }
  }

  /**
   * Makes `next` current: every query from here goes to it. Resolves once the pool it replaced
   * has finished its running queries and has been ended; rejects as that `end()` does.
   */
  async swap(next: PoolInUse<P>): Promise<void> {
    const previous = this.current;
    this.current = next;
    if (previous.pool !== next.pool) await this.endWhenIdle(previous.pool);
  }

  /** Ends the current pool once its running queries have finished (at shutdown: stop starting queries first). */
  end(): Promise<void> {
    return this.endWhenIdle(this.current.pool);
  }

  private async endWhenIdle(pool: P): Promise<void> {
    const r = this.running.get(pool);
    if (r && r.count > 0) await new Promise<void>((resolve) => (r.idle = resolve));
    this.running.delete(pool);
    await pool.end();
  }
}
