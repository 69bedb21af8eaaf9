/**
 * The delete request: modules and providers go from the catalog (a deleted module's grants
 * are then taken back, removal.ts), and what a removed grant retained is dropped. Checked
 * whole first, then done: any problem deletes nothing. The control plane protects itself:
 * deleting module `mesh`, or a provider that still serves grants (the control plane's among
 * them), needs `force`.
 */
import { CONTROL_PLANE_MODULE, DeleteRequest, ErrorCodes, Grant, MeshError, isRevoked, isValidName, keys, parseGrantId, type DeleteReply } from "@mesh/shared";
import { listJson, mutateJson, retryJetStreamGap, type KV, type Store } from "@mesh/shared/runtime";

type Problem = Extract<DeleteReply, { ok: false }>["problems"][number];

/** Grants a provider serves (or holds a resource of), that are neither taken back nor retained. */
export function servedBy(provider: string, grants: readonly Grant[]): Grant[] {
  return grants.filter((g) => (g.provider === provider || g.resource.provider === provider) && !g.retained && !isRevoked(g));
}

/**
 * What refuses a delete, given every grant as stored. Pure. Module `mesh` and a provider that
 * still serves grants need `force`: the control plane would cut itself off (its identities,
 * its store), and a forced provider's grants are re-resolved (moved to another provider by a
 * handover, or `NoProvider`).
 */
export function deleteProblems(
  req: DeleteRequest,
  grants: readonly Grant[],
  exists: { module(name: string): boolean; provider(name: string): boolean },
): Problem[] {
  const problems: Problem[] = [];
  req.documents.forEach((d, document) => {
    if (!isValidName(d.name)) return problems.push({ document, path: "name", message: `${JSON.stringify(d.name)} is not a ${d.kind.toLowerCase()} name` });
    if (d.kind === "Module") {
      if (!exists.module(d.name)) return problems.push({ document, path: "name", message: `there is no module ${d.name} (meshctl get modules lists them)` });
      if (d.name === CONTROL_PLANE_MODULE && !req.force) {
        problems.push({
          document,
          path: "name",
          message: `module ${CONTROL_PLANE_MODULE} is the mesh's own control plane: deleting it revokes the services' identities and store, and the mesh stops; refused without --force`,
        });
      }
      return;
    }
    if (!exists.provider(d.name))
      return problems.push({ document, path: "name", message: `there is no provider ${d.name} (meshctl get providers lists them)` });
    const served = servedBy(d.name, grants);
    const deleting = new Set(req.documents.filter((x) => x.kind === "Module").map((x) => x.name));
    if (served.length && !req.force && served.every((g) => deleting.has(g.module))) {
      // Its grants are revoked through it: it must outlive them.
      return problems.push({
        document,
        path: "name",
        message: `provider ${d.name} serves grants of the modules deleted with it (${[...new Set(served.map((g) => g.module))].join(", ")}), which are revoked through it: delete the modules first, then the provider once meshctl status shows them gone`,
      });
    }
    if (served.length && !req.force) {
      const mine = served.filter((g) => g.module === CONTROL_PLANE_MODULE).map((g) => g.id);
      const shown =
        served
          .slice(0, 5)
          .map((g) => g.id)
          .join(", ") + (served.length > 5 ? ` and ${served.length - 5} more` : "");
      problems.push({
        document,
        path: "name",
        message:
          `provider ${d.name} still serves ${served.length} grant${served.length === 1 ? "" : "s"} (${shown})` +
          (mine.length ? `, the control plane's own among them (${mine.join(", ")})` : "") +
          `; refused without --force, which re-resolves them (to another provider, by a handover, or NoProvider)`,
      });
    }
  });
  for (const id of req.retained) {
    const g = grants.find((x) => x.id === id);
    if (!parseGrantId(id)) problems.push({ document: -1, path: "retained", message: `${JSON.stringify(id)} is not a grant (MODULE/REQUIREMENT)` });
    else if (!g?.retained) problems.push({ document: -1, path: "retained", message: `${id} retains nothing (meshctl status lists what is retained)` });
  }
  return problems;
}

/** Handles one delete request. */
export async function handleDelete(store: Store, body: unknown): Promise<DeleteReply> {
  const parsed = DeleteRequest.safeParse(body);
  if (!parsed.success) throw new MeshError(ErrorCodes.InvalidRequest, `not a delete request: ${parsed.error.issues.map((i) => i.message).join("; ")}`);
  const req = parsed.data;
  const [grants, moduleNames, providerNames] = await retryJetStreamGap(() =>
    Promise.all([listJson(store.kv.grants, Grant), keysOf(store.kv.manifests), keysOf(store.kv.providers)]),
  );
  const problems = deleteProblems(
    req,
    grants.map((g) => g.value),
    { module: (n) => moduleNames.has(n), provider: (n) => providerNames.has(n) },
  );
  if (problems.length) return { ok: false, problems };
  const deleted: Array<{ kind: "Provider" | "Module" | "Retained"; name: string }> = [];
  for (const d of req.documents) {
    await retryJetStreamGap(() => (d.kind === "Module" ? store.kv.manifests : store.kv.providers).delete(d.name));
    deleted.push(d);
  }
  for (const id of req.retained) {
    const { module, requirement } = parseGrantId(id)!;
    // Dropped as a removed grant whose policy is Delete: revoked again, and the resource with it.
    await retryJetStreamGap(() =>
      mutateJson(store.kv.grants, keys.grant(module, requirement), Grant, (cur): Grant | undefined =>
        cur?.retained
          ? {
              ...cur,
              retained: undefined,
              revoked: undefined,
              deletionPolicy: "Delete",
              removal: { requestedAt: new Date().toISOString(), reason: "meshctl delete retained" },
            }
          : undefined,
      ),
    );
    deleted.push({ kind: "Retained", name: id });
  }
  return { ok: true, deleted };
}

async function keysOf(kv: KV): Promise<Set<string>> {
  const found = new Set<string>();
  for await (const k of await kv.keys()) found.add(k);
  return found;
}
