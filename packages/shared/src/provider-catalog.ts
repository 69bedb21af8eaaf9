/**
 * The providers catalog as a service reads it often (every module's resolution, every rotation
 * of a secret that may be an admin password): read once per change of the providers bucket.
 */
import { Buckets } from "./subjects.js";
import { ProviderDoc } from "./schemas/manifest.js";
import { kvStream } from "./kv-names.js";
import { listJson } from "./kv-records.js";
import { retryJetStreamGap } from "./jetstream-retry.js";
import type { Store } from "./store.js";

/**
 * The providers catalog, read once per change of the providers bucket rather than once per
 * module: the cache is valid while the bucket's stream has not moved, which costs one
 * stream-info call to check. Every instance checks against the store, so none acts on a
 * stale catalog.
 */
export class ProviderCatalog {
  private seq = -1;
  private providers: ProviderDoc[] = [];
  constructor(private readonly store: Store) {}

  async current(): Promise<ProviderDoc[]> {
    const info = await retryJetStreamGap(() => this.store.jsm.streams.info(kvStream(Buckets.providers)));
    if (info.state.last_seq !== this.seq) {
      const list = await listJson(this.store.kv.providers, ProviderDoc);
      this.providers = list.map((r) => r.value);
      this.seq = info.state.last_seq;
    }
    return this.providers;
  }
}
