/**
 * Agents' reachability reports as the resolver uses them: which nodes a provider cannot be
 * reached from. A provider with no report from a node counts as reachable from it (an agent
 * that has not probed yet must not block resolution).
 */
import { Buckets, ReachabilityRecord, kvStream, type GrantTarget } from "@mesh/shared";
import { listJson, retryJetStreamGap, type Store } from "@mesh/shared/runtime";

/**
 * The reports that say `provider` cannot be reached from the node of one of `targets`, one
 * per node, sorted by node. Pure.
 */
export function unreachableFrom(provider: string, targets: readonly GrantTarget[], reports: readonly ReachabilityRecord[]): ReachabilityRecord[] {
  const nodes = new Set(targets.map((t) => t.node));
  return reports.filter((r) => r.provider === provider && nodes.has(r.node) && !r.reachable).sort((a, b) => a.node.localeCompare(b.node));
}

/**
 * The reachability reports, read again only when the bucket's stream has moved (one
 * stream-info call per use), like {@link ProviderCatalog}.
 */
export class ReachabilityCatalog {
  private seq = -1;
  private reports: ReachabilityRecord[] = [];
  constructor(private readonly store: Store) {}

  async current(): Promise<ReachabilityRecord[]> {
    const info = await retryJetStreamGap(() => this.store.jsm.streams.info(kvStream(Buckets.reachability)));
    if (info.state.last_seq !== this.seq) {
      this.reports = (await listJson(this.store.kv.reachability, ReachabilityRecord)).map((r) => r.value);
      this.seq = info.state.last_seq;
    }
    return this.reports;
  }
}
