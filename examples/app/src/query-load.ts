/**
 * A steady load: one query started every `everyMs`, whether or not the ones before have
 * finished (so queries are in flight on the old pool when a rotation swaps it out), each
 * counted as it settles, the successes by the generation they ran on.
 */

/** What the load has counted so far. */
export interface LoadCounts {
  ok: number;
  failed: number;
  /** Successful queries per credential generation. */
  byGeneration: Record<number, number>;
  /** The message of the last failure, if any (never a value of the credential: a driver's message names the user at most). */
  lastError?: string;
}

/** A running load: `stop()` starts no more queries and resolves once those started have settled. */
export interface QueryLoad {
  readonly counts: LoadCounts;
  readonly inFlight: number;
  stop(): Promise<void>;
}

/** Starts `query` every `everyMs` milliseconds; it resolves with the generation it ran on. */
export function startLoad(query: () => Promise<{ generation: number }>, everyMs: number): QueryLoad {
  const counts: LoadCounts = { ok: 0, failed: 0, byGeneration: {} };
  const running = new Set<Promise<void>>();
  const one = (): void => {
    const p = query().then(
      ({ generation }) => {
        counts.ok++;
        counts.byGeneration[generation] = (counts.byGeneration[generation] ?? 0) + 1;
      },
      (e: unknown) => {
        counts.failed++;
        counts.lastError = e instanceof Error ? e.message : String(e);
      },
    );
    running.add(p);
    void p.finally(() => running.delete(p));
  };
  const timer = setInterval(one, everyMs);
  return {
    counts,
    get inFlight() {
      return running.size;
    },
    async stop() {
      clearInterval(timer);
      await Promise.all([...running]);
    },
  };
}
