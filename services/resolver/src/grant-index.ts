/**
 * Which requirements each module has grants for, kept from one watch of the grants bucket's
 * keys (headers only: no value travels), so that a reconcile reads its module's grants by key
 * instead of listing them. A listing is an ordered consumer made and dropped on the server: one
 * per reconcile made the server hold thousands at 10,000 grants, every write to the bucket
 * matched against each, and declaring 10,000 modules slowed to a crawl (bench/growth.bench.ts).
 *
 * The index may lag a write by the watch's delivery: a reconcile that misses a grant written an
 * instant ago is followed by the reconcile that grant's own change triggers (level-triggered).
 */
import type { Store } from "@mesh/shared/runtime";
import type { Logger } from "@mesh/shared/service";

/** The index; see the file's doc comment. */
export interface GrantIndex {
  /** The requirements module `module` has grants for (as of the watch's last delivery). */
  requirementsOf(module: string): string[];
  stop(): void;
}

/** Starts the index: lists the grants' keys once (beside a watch of later changes, so none is lost between the two) and resolves once both are in. */
export async function startGrantIndex(store: Store, log: Logger): Promise<GrantIndex> {
  const byModule = new Map<string, Set<string>>();
  const apply = (key: string, present: boolean) => {
    const dot = key.indexOf(".");
    if (dot < 0) return;
    const [module, requirement] = [key.slice(0, dot), key.slice(dot + 1)];
    const set = byModule.get(module) ?? new Set<string>();
    if (present) set.add(requirement);
    else set.delete(requirement);
    if (set.size) byModule.set(module, set);
    else byModule.delete(module);
  };
  // Changes while the listing runs are kept and applied after it, in order.
  let buffered: Array<[string, boolean]> | undefined = [];
  const watch = await store.kv.grants.watch({ include: "updates", headers_only: true });
  void (async () => {
    for await (const e of watch) {
      const present = e.operation === "PUT";
      if (buffered) buffered.push([e.key, present]);
      else apply(e.key, present);
    }
  })().catch((e: unknown) => log.error({ err: e }, "the resolver's index of grants stopped; reconciles may miss a grant until it restarts"));
  for await (const k of await store.kv.grants.keys()) apply(k, true);
  for (const [k, present] of buffered) apply(k, present);
  buffered = undefined;
  return {
    requirementsOf: (module) => [...(byModule.get(module) ?? [])],
    stop: () => watch.stop(),
  };
}
