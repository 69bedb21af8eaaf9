/**
 * Reconciling one module: resolve its requirements against the providers as they are now,
 * write the grants that changed, drop grants of requirements it no longer declares, and
 * record the module's state.
 */
import {
  Grant,
  ModuleDoc,
  ModuleStatus,
  ProviderDoc,
  Buckets,
  deriveModuleState,
  keys,
  kvStream,
  listJson,
  mutateJson,
  readJson,
  type Logger,
  type Store,
} from "@mesh/shared";
import { applyResolution, resolveModule } from "./resolve.js";
import type { ReachabilityCatalog } from "./reachability.js";

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
    const info = await this.store.jsm.streams.info(kvStream(Buckets.providers));
    if (info.state.last_seq !== this.seq) {
      const list = await listJson(this.store.kv.providers, ProviderDoc);
      this.providers = list.map((r) => r.value);
      this.seq = info.state.last_seq;
    }
    return this.providers;
  }
}

/** Reconciles module `name`. Idempotent: a second run with nothing changed writes nothing. */
export async function reconcileModule(
  store: Store,
  catalog: ProviderCatalog,
  name: string,
  log: Logger,
  reachability?: ReachabilityCatalog,
): Promise<void> {
  const manifest = await readJson(store.kv.manifests, name, ModuleDoc);
  const existing = await listJson(store.kv.grants, Grant, keys.grantsOf(name));
  if (!manifest) {
    // The manifest was deleted: the module is no longer processed.
    for (const g of existing) await store.kv.grants.delete(g.key);
    await store.kv.modules.delete(name);
    log.info({ module: name }, "module removed");
    return;
  }
  const providers = await catalog.current();
  const current = new Map(existing.map((g) => [g.value.requirement, g.value.provider]));
  const resolutions = resolveModule(manifest.value, providers, current, (await reachability?.current()) ?? []);
  const grants: Grant[] = [];
  for (const r of resolutions) {
    const g = await mutateJson(store.kv.grants, keys.grant(r.module, r.requirement), Grant, (cur) => applyResolution(cur, r));
    if (g) grants.push(g);
  }
  const declared = new Set(resolutions.map((r) => r.requirement));
  for (const g of existing) {
    if (!declared.has(g.value.requirement)) {
      // The resource itself is kept: dropping a database is an operator's decision.
      await store.kv.grants.delete(g.key);
      log.info({ grant: g.value.id }, "requirement no longer declared; grant removed, resource kept");
    }
  }
  const derived = deriveModuleState(manifest.value.requires.length, grants);
  await mutateJson(store.kv.modules, name, ModuleStatus, (cur) => {
    if (cur && cur.state === derived.state && cur.message === derived.message && cur.manifestRevision === manifest.revision) {
      return undefined;
    }
    const now = new Date().toISOString();
    if (!cur || cur.state !== derived.state) log.info({ module: name, state: derived.state, why: derived.message }, "module state");
    return {
      module: name,
      state: derived.state,
      message: derived.message,
      requirements: manifest.value.requires.length,
      manifestRevision: manifest.revision,
      processedAt: now,
      since: cur && cur.state === derived.state ? cur.since : now,
    };
  });
}
