/**
 * The apply request: validate every document, then store all of them or none.
 */
import {
  ApplyRequest,
  ErrorCodes,
  Kinds,
  MeshError,
  ModuleDoc,
  ProviderDoc,
  adminPasswordPolicy,
  checkAdminPassword,
  listJson,
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
    const problems = outsideModule(result.documents, onlyModule);
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
  const accepted: AppliedDocument[] = [];
  // Each write is idempotent, so one that met JetStream's reload gap is simply made again.
  for (const doc of result.documents) accepted.push(await retryJetStreamGap(() => storeDocument(store, doc)));
  return { ok: true, accepted };
}

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

/** The documents of a request on module `module`'s apply subject that are not that module. */
export function outsideModule(documents: readonly ManifestDoc[], module: string): Problem[] {
  return documents.flatMap((d, i) =>
    d.kind === "Module" && d.name === module
      ? []
      : [
          {
            document: i,
            path: d.kind === "Module" ? "name" : "kind",
            message: `on ${subjects.applyModule(module)} only module ${module} may be declared, not ${d.kind} ${d.name}: Providers and other modules are the operator's (apply them as the operator, on ${subjects.apply})`,
          },
        ],
  );
}
