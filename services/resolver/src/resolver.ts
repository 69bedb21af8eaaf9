/**
 * The resolver service: serves `apply`, and reconciles a module whenever its manifest, any
 * provider, or one of its grants changes. Several instances share the work through durable
 * consumers; compare-and-set on every write keeps them from undoing each other.
 */
import { AuditedRequests, Durables, Buckets, KeyedQueue, adminPasswordPolicy, QueueGroups, kvKeyOf, operatorRequestSubjects, subjects } from "@mesh/shared";
import { AuditLog, ProviderCatalog, consumeKeys, serveJson, type Store } from "@mesh/shared/runtime";
import type { Logger } from "@mesh/shared/service";
import { handleApply, partOfApplySubject } from "./apply.js";
import { handleDelete } from "./delete.js";
import { reconcileModule } from "./reconcile.js";
import { startGrantIndex } from "./grant-index.js";
import { ReachabilityCatalog } from "./reachability.js";

export interface Resolver {
  /** Reconciles one module now (also what the consumers do); for tests and tools. */
  reconcile(module: string): Promise<void>;
  stop(): Promise<void>;
}

/** How often every module is reconciled even when nothing said it changed. */
export const RESYNC_MS = 5 * 60_000;

/**
 * Starts the resolver. `env` (default `process.env`) says where the mesh's own secrets are and
 * how the services narrow what a Provider's admin password may name (`adminPasswordPolicy`);
 * read once, at start: a bad `MESH_ADMIN_PASSWORD_*` value fails the start.
 */
export async function startResolver(opts: { store: Store; log: Logger; env?: NodeJS.ProcessEnv }): Promise<Resolver> {
  const { store, log } = opts;
  const policy = adminPasswordPolicy(opts.env ?? process.env);
  const catalog = new ProviderCatalog(store);
  const reachability = new ReachabilityCatalog(store);
  const index = await startGrantIndex(store, log);
  // Whether each grant that a provider needs was provisioned when this instance last looked.
  const neededSeen = new Map<string, boolean>();
  const modules = new KeyedQueue(async (name: string) => {
    const needed = await reconcileModule(store, catalog, name, log.child({ module: name }), reachability, index);
    // A needed grant became (un)provisioned: requirements of any module may wait for it. What
    // was seen is recorded once they were all re-resolved, so a failure is tried again by the
    // next reconcile of this module rather than forgotten.
    const changed = [...needed].filter(([id, provisioned]) => neededSeen.get(id) !== provisioned);
    if (changed.length === 0) return;
    providers
      .enqueue("*")
      .then(() => {
        for (const [id, provisioned] of changed) neededSeen.set(id, provisioned);
      })
      .catch((e: unknown) =>
        log.warn({ err: e }, "re-resolving the modules after a needed grant changed failed; the next reconcile of its module tries again"),
      );
  }, 16);
  // A provider change may affect any module: re-resolve them all.
  const providers: KeyedQueue = new KeyedQueue(async () => {
    const names: string[] = [];
    for await (const k of await store.kv.manifests.keys()) names.push(k);
    await Promise.all(names.map((n) => modules.enqueue(n)));
  }, 1);

  // Every apply, delete and declaration is in the audit trail before it is answered.
  const trail = new AuditLog(store.nc, "resolver");
  const api = serveJson(store.nc, operatorRequestSubjects(subjects.apply), QueueGroups.resolver, log, (body) => handleApply(store, body, policy), {
    audit: { log: trail, request: AuditedRequests.apply },
  });
  const deletes = serveJson(store.nc, operatorRequestSubjects(subjects.delete), QueueGroups.resolver, log, (body) => handleDelete(store, body), {
    audit: { log: trail, request: AuditedRequests.delete },
  });
  // A module's own subject: what a part's identity may declare (its module, nothing else).
  const partApi = serveJson(
    store.nc,
    subjects.applyPartsAll,
    QueueGroups.resolver,
    log,
    (body, m) => handleApply(store, body, policy, partOfApplySubject(m.subject) ?? "unknown"),
    { audit: { log: trail, request: AuditedRequests.declare } },
  );
  const consumers = await Promise.all([
    consumeKeys({
      store,
      durable: Durables.resolverManifests,
      keyOf: kvKeyOf(Buckets.manifests),
      queue: modules,
      log,
    }),
    consumeKeys({
      store,
      durable: Durables.resolverProviders,
      // Every provider change collapses onto one key: "all modules".
      keyOf: (s) => (kvKeyOf(Buckets.providers)(s) ? "*" : undefined),
      queue: providers,
      log,
    }),
    consumeKeys({
      store,
      durable: Durables.resolverReachability,
      // A provider became (un)reachable from a node: any module may be affected, as for a provider change.
      keyOf: (s) => (kvKeyOf(Buckets.reachability)(s) ? "*" : undefined),
      queue: providers,
      log,
    }),
    consumeKeys({
      store,
      durable: Durables.resolverGrants,
      // A grant changed: its module's state may have changed.
      keyOf: (s) => kvKeyOf(Buckets.grants)(s)?.split(".")[0],
      queue: modules,
      log,
    }),
  ]);
  // A periodic resync, as controllers do: whatever a lost event left behind (a wake-up that
  // failed, a message acknowledged before the work it triggered) is reconciled within minutes.
  const resync = setInterval(() => void providers.enqueue("*").catch((e: unknown) => log.warn({ err: e }, "resync failed")), RESYNC_MS);
  resync.unref();
  log.info("resolver started");
  let stopped: Promise<void> | undefined;
  return {
    reconcile: (module) => modules.enqueue(module),
    stop() {
      stopped ??= (async () => {
        clearInterval(resync);
        await Promise.all([api.stop(), partApi.stop(), deletes.stop()]);
        await Promise.all(consumers.map((c) => c.stop()));
        index.stop();
      })();
      return stopped;
    },
  };
}
