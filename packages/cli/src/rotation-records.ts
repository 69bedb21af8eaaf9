/**
 * Reading rotation records for meshctl: the mesh keeps one record per grant (KV
 * `mesh-rotations`, the latest rotation), plus the bucket's few past revisions, in which an
 * earlier rotation of the grant may still be found.
 */
import { Rotation, keys, parseGrantId, parseRotationId, readJson, retryJetStreamGap, type Store } from "@mesh/shared";

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
  let found: Rotation | undefined;
  const history = await retryJetStreamGap(() => store.kv.rotations.history({ key }));
  for await (const e of history) {
    if (e.operation !== "PUT") continue;
    const r = Rotation.safeParse(e.json());
    if (r.success && r.data.id === id) found = r.data; // history is oldest first: keep the newest
  }
  return found ? { rotation: found } : undefined;
}

/** The latest rotation of a grant, whatever its id; undefined when the grant never rotated. */
export async function latestRotation(store: Store, grant: string): Promise<Rotation | undefined> {
  const g = parseGrantId(grant);
  if (!g) return undefined;
  return (await readJson(store.kv.rotations, keys.grant(g.module, g.requirement), Rotation))?.value;
}
