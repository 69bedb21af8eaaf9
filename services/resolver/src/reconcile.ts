/**
 * Reconciling one module: resolve its requirements against the providers as they are now,
 * write the grants that changed, mark the grants of requirements it no longer declares to be
 * taken back (the provisioner does it), and record the module's state.
 */
import {
  Grant,
  type ModuleDoc,
  ModuleStates,
  ModuleStatus,
  type Problem,
  type ProviderDoc,
  deriveModuleState,
  deletedModuleState,
  keys,
  validateDocuments,
  withRemoval,
  type DerivedState,
  readableRecord,
} from "@mesh/shared";
import { type ProviderCatalog, getAtFloor, listJson, mutateJson, readJson, retryJetStreamGap, type Store } from "@mesh/shared/runtime";
import type { Logger } from "@mesh/shared/service";
import { applyResolution, resolveModule } from "./resolve.js";
import { neededGrant, neededGrantIds, type NeededGrant } from "./dependencies.js";
import type { ReachabilityCatalog } from "./reachability.js";
import type { GrantIndex } from "./grant-index.js";

/** The grants of module `name`: by key from `index` when there is one, else by listing the bucket. */
async function grantsOf(store: Store, name: string, index: GrantIndex | undefined): Promise<Array<{ key: string; value: Grant; revision: number }>> {
  if (!index) return listJson(store.kv.grants, Grant, keys.grantsOf(name));
  const found = await Promise.all(
    index.requirementsOf(name).map(async (r) => {
      const key = keys.grant(name, r);
      const g = await readJson(store.kv.grants, key, Grant);
      return g ? [{ key, ...g }] : [];
    }),
  );
  return found.flat().sort((a, b) => a.key.localeCompare(b.key));
}

/** The stored state of every grant some provider needs (see dependencies.ts). */
export async function readNeededGrants(store: Store, providers: readonly ProviderDoc[]): Promise<Map<string, NeededGrant>> {
  const needed = new Map<string, NeededGrant>();
  await Promise.all(
    neededGrantIds(providers).map(async (id) => {
      const [module, requirement] = id.split("/") as [string, string];
      const g = await readJson(store.kv.grants, keys.grant(module, requirement), Grant);
      if (g) needed.set(id, neededGrant(g.value));
    }),
  );
  return needed;
}

/**
 * Reconciles module `name`. Idempotent: a second run with nothing changed writes nothing. Its
 * grants are read by key from `index` (grant-index.ts) when given, else listed.
 * Returns the module's grants that some provider needs, with whether each is provisioned,
 * so the caller can wake the requirements that wait for them.
 */
export async function reconcileModule(
  store: Store,
  catalog: ProviderCatalog,
  name: string,
  log: Logger,
  reachability?: ReachabilityCatalog,
  index?: GrantIndex,
): Promise<Map<string, boolean>> {
  const neededHere = new Map<string, boolean>();
  const stored = await readStoredManifest(store, name);
  if (stored && "problems" in stored) {
    // Stored by an earlier version under rules it no longer meets: shown, and the grants left as they are.
    await writeModuleState(store, name, unreadableManifestState(stored.problems), stored.requirements, stored.revision, log);
    return neededHere;
  }
  const manifest = stored;
  const existing = await grantsOf(store, name, index);
  if (!manifest) {
    // The module was deleted: every grant of it is taken back (removal.ts says how far each is).
    for (const g of existing) await markRemoved(store, g.key, "the module was deleted", log);
    const left = (await grantsOf(store, name, index)).map((g) => g.value);
    const status = deletedModuleState(left);
    if (!status) {
      await store.kv.modules.delete(name);
      log.info({ module: name }, "module removed");
    } else {
      await writeModuleState(store, name, status, 0, 0, log);
    }
    return neededHere;
  }
  const providers = await catalog.current();
  const current = new Map(existing.map((g) => [g.value.requirement, g.value.provider]));
  const needed = await readNeededGrants(store, providers);
  const resolutions = resolveModule(manifest.value, providers, current, (await reachability?.current()) ?? [], needed);
  const grants: Grant[] = [];
  for (const r of resolutions) {
    const g = await mutateJson(store.kv.grants, keys.grant(r.module, r.requirement), Grant, (cur) => applyResolution(cur, r));
    if (g) grants.push(g);
  }
  const neededIds = new Set(neededGrantIds(providers));
  for (const g of grants) if (neededIds.has(g.id)) neededHere.set(g.id, neededGrant(g).provisioned);
  const declared = new Set(resolutions.map((r) => r.requirement));
  for (const g of existing) {
    // Taken back: revoked at its provider, its values purged, its bindings removed (the provisioner's).
    if (!declared.has(g.value.requirement)) await markRemoved(store, g.key, "the module no longer declares it", log);
  }
  const derived = deriveModuleState(resolutions.length, grants, resolutions.length - manifest.value.requires.length);
  await writeModuleState(store, name, derived, manifest.value.requires.length, manifest.revision, log);
  return neededHere;
}

/**
 * The stored manifest of module `name`: its document, or, when it no longer meets the rules (a
 * manifest stored by an earlier version, such as a part's `onRotate` that was shell text), its
 * problems; undefined when none is stored.
 */
async function readStoredManifest(
  store: Store,
  name: string,
): Promise<{ value: ModuleDoc; revision: number } | { problems: Problem[]; requirements: number; revision: number } | undefined> {
  const e = await retryJetStreamGap(() => getAtFloor(store.kv.manifests, name));
  if (!e || e.operation !== "PUT" || e.length === 0) return undefined;
  let raw: unknown;
  try {
    raw = e.json();
  } catch {
    raw = undefined;
  }
  raw = readableRecord(raw, `${e.bucket}/${e.key}`);
  const r = validateDocuments([raw]);
  if (r.ok && r.documents[0]?.kind === "Module") return { value: r.documents[0], revision: e.revision };
  const requires = (raw as { requires?: unknown } | undefined)?.requires;
  const problems = r.ok ? [{ document: 0, path: "kind", message: "is not a Module" }] : r.problems;
  return { problems, requirements: Array.isArray(requires) ? requires.length : 0, revision: e.revision };
}

/** A module whose stored manifest no longer reads: Degraded, saying where and what to do. Pure. */
export function unreadableManifestState(problems: readonly Problem[]): DerivedState {
  const where = problems.map((p) => `${p.path ? `${p.path}: ` : ""}${p.message}`).join("; ");
  return {
    state: ModuleStates.Degraded,
    message: `its stored manifest no longer meets this version's rules (${where}); its grants are left as they are, and changes reach it again once it is applied fixed (meshctl apply -f FILE)`,
  };
}

/** Marks the grant under `key` to be taken back (once; a grant already marked, or retained, is left as it is). */
async function markRemoved(store: Store, key: string, reason: string, log: Logger): Promise<void> {
  const g = await mutateJson(store.kv.grants, key, Grant, (cur) => (cur && !cur.removal && !cur.retained ? withRemoval(cur, reason) : undefined));
  if (g?.removal?.reason === reason) log.info({ grant: g.id, why: reason }, "requirement no longer needed; taking the grant back");
}

async function writeModuleState(store: Store, name: string, derived: DerivedState, requirements: number, manifestRevision: number, log: Logger): Promise<void> {
  await mutateJson(store.kv.modules, name, ModuleStatus, (cur) => {
    if (cur && cur.state === derived.state && cur.message === derived.message && cur.manifestRevision === manifestRevision) {
      return undefined;
    }
    const now = new Date().toISOString();
    if (!cur || cur.state !== derived.state) log.info({ module: name, state: derived.state, why: derived.message }, "module state");
    return {
      module: name,
      state: derived.state,
      message: derived.message,
      requirements,
      manifestRevision,
      processedAt: now,
      since: cur && cur.state === derived.state ? cur.since : now,
    };
  });
}
