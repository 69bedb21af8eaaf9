/**
 * Reading rotation records for meshctl: the mesh keeps one record per grant (KV
 * `mesh-rotations`, the latest rotation), plus the bucket's few past revisions, in which an
 * earlier rotation of the grant may still be found.
 */
import { Rotation, keys, parseGrantId, parseRotationId } from "@mesh/shared";
import { entryJson, readJson, retryJetStreamGap, type Store } from "@mesh/shared/runtime";

/** A rotation found by id (an object, so fields can be added). */
export interface FoundRotation {
  rotation: Rotation;
}

/**
 * The newest recorded version of rotation `id` (`<module>/<requirement>#<generation>`), or, for a
 * bare grant id (`<module>/<requirement>`), of the grant's latest rotation. Undefined when it is
 * not (or no longer) recorded, or when `id` is neither form.
 */
export async function findRotation(store: Store, id: string): Promise<FoundRotation | undefined> {
  const rid = parseRotationId(id);
  const grant = parseGrantId(rid?.grant ?? id);
  if (!grant) return undefined;
  const key = keys.grant(grant.module, grant.requirement);
  const latest = (await readJson(store.kv.rotations, key, Rotation))?.value;
  if (!rid) return latest ? { rotation: latest } : undefined;
  if (latest?.id === id) return { rotation: latest };
  // An earlier rotation of the grant: its last revision may still be in the bucket's history.
  const found = (await rotationsOf(store, grant.module, grant.requirement)).find((r) => r.id === id);
  return found ? { rotation: found } : undefined;
}

/**
 * Every rotation of a grant still recorded (the latest and those the bucket's history keeps),
 * each as its newest revision says, oldest first.
 */
export async function rotationsOf(store: Store, module: string, requirement: string): Promise<Rotation[]> {
  const byId = new Map<string, Rotation>();
  const history = await retryJetStreamGap(() => store.kv.rotations.history({ key: keys.grant(module, requirement) }));
  for await (const e of history) {
    if (e.operation !== "PUT") continue;
    const r = Rotation.safeParse(entryJson(e));
    // History is oldest first: a later revision of a rotation replaces the earlier, in its place.
    if (r.success) byId.set(r.data.id, r.data);
  }
  return [...byId.values()];
}

/** The latest rotation of a grant, whatever its id; undefined when the grant never rotated. */
export async function latestRotation(store: Store, grant: string): Promise<Rotation | undefined> {
  const g = parseGrantId(grant);
  if (!g) return undefined;
  return (await readJson(store.kv.rotations, keys.grant(g.module, g.requirement), Rotation))?.value;
}
