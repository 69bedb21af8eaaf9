/**
 * The apply request: validate every document, then store all of them or none.
 */
import {
  ApplyRequest,
  CONTROL_PLANE_MODULE,
  ErrorCodes,
  Kinds,
  MeshError,
  ModuleDoc,
  ProviderDoc,
  adminPasswordPolicy,
  checkAdminPassword,
  listJson,
  readJson,
  retryJetStreamGap,
  storeWrite,
  validateDocuments,
  subjects,
  type AdminPasswordPolicy,
  type AppliedDocument,
  type ApplyReply,
  type ManifestDoc,
  type Problem,
  type Store,
} from "@mesh/shared";
import { ceilingProblems } from "./ceiling-check.js";

/**
 * Handles one apply: a request that fails validation stores nothing and gets every problem
 * back; a valid one is stored document by document (each write is idempotent, so a retry
 * after a failure half-way converges to the same state). Beyond the schemas, a Provider's
 * admin password source must be one `policy` allows (see admin-password-policy.ts). On a
 * module's own subject (`onlyModule`: what a part's identity may publish to) every document
 * must be that module; any other (a Provider, another module) is a problem of the request, and
 * nothing is stored. So is a `nats.user` requirement past the ceiling of every provider that
 * could serve it (ceiling-check.ts).
 */
export async function handleApply(store: Store, body: unknown, policy: AdminPasswordPolicy = adminPasswordPolicy(), onlyModule?: string): Promise<ApplyReply> {
  const req = ApplyRequest.safeParse(body);
  if (!req.success) {
    throw new MeshError(ErrorCodes.InvalidRequest, `not an apply request: ${req.error.issues.map((i) => i.message).join("; ")}`);
  }
  const result = validateDocuments(req.data.documents);
  if (!result.ok) return { ok: false, problems: result.problems };
  if (onlyModule !== undefined) {
    const stored = await retryJetStreamGap(() => readJson(store.kv.manifests, onlyModule, ModuleDoc));
    const problems = selfDeclarationProblems(result.documents, onlyModule, stored?.value);
    if (problems.length) return { ok: false, problems };
  }
  // Documents come back in their order when all are valid, so the index is the document's.
  const refused: Problem[] = result.documents.flatMap((doc, document) => {
    const p = doc.kind === "Provider" ? checkAdminPassword(doc, policy) : undefined;
    return p ? [{ document, ...p }] : [];
  });
  if (refused.length) return { ok: false, problems: refused };
  if (result.documents.some((d) => d.kind === "Module" && d.requires.some((r) => r.kind === Kinds.NatsUser))) {
    const stored = await retryJetStreamGap(() => listJson(store.kv.providers, ProviderDoc));
    const problems = ceilingProblems(result.documents, stored.map((r) => r.value));
    if (problems.length > 0) return { ok: false, problems };
  }
  const selfCut = await controlPlaneCuts(store, result.documents, req.data.force === true);
  if (selfCut.length) return { ok: false, problems: selfCut };
  // Each write is idempotent, so one that met JetStream's reload gap is simply made again. The
  // documents are stored STORE_CONCURRENCY at a time (each names its own key, so their order
  // does not matter): one after another, 256 of them took the resolver seconds on a loaded machine.
  const accepted: AppliedDocument[] = new Array(result.documents.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(STORE_CONCURRENCY, result.documents.length) }, async () => {
      while (next < result.documents.length) {
        const i = next++;
        accepted[i] = await retryJetStreamGap(() => storeDocument(store, result.documents[i]!));
      }
    }),
  );
  return { ok: true, accepted };
}

/**
 * The control plane protects itself: a module `mesh` that drops a requirement the stored one
 * has (an identity, its store) is refused without `force`.
 */
async function controlPlaneCuts(store: Store, documents: readonly ManifestDoc[], force: boolean): Promise<Problem[]> {
  const document = documents.findIndex((d) => d.kind === "Module" && d.name === CONTROL_PLANE_MODULE);
  if (force || document < 0) return [];
  const stored = (await retryJetStreamGap(() => readJson(store.kv.manifests, CONTROL_PLANE_MODULE, ModuleDoc)))?.value;
  const next = new Set((documents[document] as ModuleDoc).requires.map((r) => r.name));
  const dropped = (stored?.requires ?? []).map((r) => r.name).filter((n) => !next.has(n));
  if (!dropped.length) return [];
  return [{ document, path: "requires", message: `module ${CONTROL_PLANE_MODULE} is the mesh's own control plane: dropping ${dropped.join(", ")} revokes what its services run on; refused without --force` }];
}

/** Documents of one apply stored at once. */
export const STORE_CONCURRENCY = 32;

async function storeDocument(store: Store, doc: ManifestDoc): Promise<AppliedDocument> {
  const kv = doc.kind === "Module" ? store.kv.manifests : store.kv.providers;
  const schema = doc.kind === "Module" ? ModuleDoc : ProviderDoc;
  const before = await kv.get(doc.name);
  const data = JSON.stringify(doc);
  const put = () => storeWrite(kv, doc.name, () => kv.put(doc.name, data), { bytes: Buffer.byteLength(data) });
  if (before && before.operation === "PUT" && before.length > 0) {
    const prev = schema.safeParse(before.json());
    if (prev.success && JSON.stringify(prev.data) === data) return { kind: doc.kind, name: doc.name, action: "unchanged" };
    await put();
    return { kind: doc.kind, name: doc.name, action: "updated" };
  }
  await put();
  return { kind: doc.kind, name: doc.name, action: "created" };
}

/**
 * What a part may not declare on its module's own subject (`mesh.api.apply.<module>`), given the
 * module as stored (`stored`, as the operator or an earlier declaration left it): anything but
 * that module (a Provider, another module); a module the operator has not declared yet; other
 * `parts` or `allowKinds` than stored (where parts run, and what they may ask for, are the
 * operator's); a requirement, new or changed, of a kind outside the stored `allowKinds`. Pure.
 */
export function selfDeclarationProblems(documents: readonly ManifestDoc[], module: string, stored: ModuleDoc | undefined): Problem[] {
  const operators = `are the operator's (apply them as the operator, on ${subjects.apply})`;
  return documents.flatMap((d, document): Problem[] => {
    if (d.kind !== "Module" || d.name !== module) {
      return [{ document, path: d.kind === "Module" ? "name" : "kind", message: `on ${subjects.applyModule(module)} only module ${module} may be declared, not ${d.kind} ${d.name}: Providers and other modules ${operators}` }];
    }
    if (!stored) return [{ document, path: "", message: `module ${module} has not been declared by the operator yet: a part may only declare again a module the operator declared` }];
    const same = (a: unknown, b: unknown) => JSON.stringify(a ?? null) === JSON.stringify(b ?? null);
    const problems: Problem[] = [];
    if (!same(d.parts, stored.parts)) problems.push({ document, path: "parts", message: `a part may not change module ${module}'s parts: which parts run where ${operators}` });
    if (!same(d.allowKinds, stored.allowKinds)) problems.push({ document, path: "allowKinds", message: `a part may not change the kinds module ${module}'s parts may declare: they ${operators}` });
    const allowed = new Set(stored.allowKinds ?? []);
    const before = new Map(stored.requires.map((r) => [r.name, r]));
    d.requires.forEach((r, i) => {
      if (allowed.has(r.kind) || same(r, before.get(r.name))) return;
      problems.push({
        document,
        path: `requires[${i}].kind`,
        message: `module ${module}'s parts may not declare a ${r.kind} (requirement ${r.name}): the operator allows them ${allowed.size ? [...allowed].join(", ") : "no kind"} (the module's allowKinds)`,
      });
    });
    return problems;
  });
}
