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
  storeWrite,
  validateDocuments,
  formatProblems,
  isValidName,
  subjects,
  type AdminPasswordPolicy,
  type AppliedDocument,
  type ApplyReply,
  type ManifestDoc,
  type Problem,
  type RequirementDoc,
  recordJson,
} from "@mesh/shared";
import { entryJson, listJson, readJson, retryJetStreamGap, type Store } from "@mesh/shared/runtime";
import { ceilingProblems } from "./ceiling-check.js";

/**
 * Handles one apply: a request that fails validation stores nothing and gets every problem
 * back; a valid one is stored document by document (each write is idempotent, so a retry
 * after a failure half-way converges to the same state). Beyond the schemas, a Provider's
 * admin password source must be one `policy` allows (see admin-password-policy.ts). On a part's
 * own subject (`from`: what a part's identity may publish to) the part may change only what is
 * its own ({@link selfDeclarationProblems}); anything else is refused as `Forbidden`, and nothing
 * is stored. A `nats.user` requirement past the ceiling of every provider that could serve it is
 * a problem of the request (ceiling-check.ts).
 */
export async function handleApply(
  store: Store,
  body: unknown,
  policy: AdminPasswordPolicy = adminPasswordPolicy(),
  from?: ApplyingPart | "unknown",
): Promise<ApplyReply> {
  if (from === "unknown")
    throw new MeshError(
      ErrorCodes.Forbidden,
      `an apply on a part's subject must name module, node and part (${subjects.applyPart("<module>", "<node>", "<part>")})`,
    );
  const req = ApplyRequest.safeParse(body);
  if (!req.success) {
    throw new MeshError(ErrorCodes.InvalidRequest, `not an apply request: ${req.error.issues.map((i) => i.message).join("; ")}`);
  }
  const result = validateDocuments(req.data.documents);
  if (!result.ok) return { ok: false, problems: result.problems };
  if (from !== undefined) {
    const stored = await retryJetStreamGap(() => readJson(store.kv.manifests, from.module, ModuleDoc));
    const problems = selfDeclarationProblems(result.documents, from, stored?.value);
    if (problems.length) {
      throw new MeshError(
        ErrorCodes.Forbidden,
        `part ${from.part} of module ${from.module} on node ${from.node} may not declare this; nothing was stored or taken back:\n${formatProblems(problems)}`,
      );
    }
  }
  // Documents come back in their order when all are valid, so the index is the document's.
  const refused: Problem[] = result.documents.flatMap((doc, document) => {
    const p = doc.kind === "Provider" ? checkAdminPassword(doc, policy) : undefined;
    return p ? [{ document, ...p }] : [];
  });
  if (refused.length) return { ok: false, problems: refused };
  if (result.documents.some((d) => d.kind === "Module" && d.requires.some((r) => r.kind === Kinds.NatsUser))) {
    const stored = await retryJetStreamGap(() => listJson(store.kv.providers, ProviderDoc));
    const problems = ceilingProblems(
      result.documents,
      stored.map((r) => r.value),
    );
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
  return [
    {
      document,
      path: "requires",
      message: `module ${CONTROL_PLANE_MODULE} is the mesh's own control plane: dropping ${dropped.join(", ")} revokes what its services run on; refused without --force`,
    },
  ];
}

/** Documents of one apply stored at once. */
export const STORE_CONCURRENCY = 32;

async function storeDocument(store: Store, doc: ManifestDoc): Promise<AppliedDocument> {
  const kv = doc.kind === "Module" ? store.kv.manifests : store.kv.providers;
  const schema = doc.kind === "Module" ? ModuleDoc : ProviderDoc;
  const before = await kv.get(doc.name);
  const data = recordJson(doc);
  const put = () => storeWrite(kv, doc.name, () => kv.put(doc.name, data), { bytes: Buffer.byteLength(data) });
  if (before && before.operation === "PUT" && before.length > 0) {
    const prev = schema.safeParse(entryJson(before));
    if (prev.success && recordJson(prev.data) === data) return { kind: doc.kind, name: doc.name, action: "unchanged" };
    await put();
    return { kind: doc.kind, name: doc.name, action: "updated" };
  }
  await put();
  return { kind: doc.kind, name: doc.name, action: "created" };
}

/**
 * What part `from` (`<module>`'s part on a node, as its apply subject names it) may not declare
 * on its own subject (`mesh.api.apply.<module>.<node>.<part>`), given the module as stored
 * (`stored`, as the operator or an earlier declaration left it): anything but its module (a
 * Provider, another module); a module the operator has not declared yet, or in which it is not
 * that part on that node; other `parts` or `allowKinds` than stored (where parts run, and what
 * they may ask for, are the operator's); and any requirement it adds, changes or removes that is
 * not its own: one whose kind is outside the stored `allowKinds`, or whose `parts` (before or
 * after) do not include it. Another part's requirements are left as they are. Pure.
 */
export function selfDeclarationProblems(documents: readonly ManifestDoc[], from: ApplyingPart, stored: ModuleDoc | undefined): Problem[] {
  const { module, part } = from;
  const subject = subjects.applyPart(module, from.node, part);
  const operators = `are the operator's (apply them as the operator, on ${subjects.apply})`;
  return documents.flatMap((d, document): Problem[] => {
    if (d.kind !== "Module" || d.name !== module) {
      return [
        {
          document,
          path: d.kind === "Module" ? "name" : "kind",
          message: `on ${subject} only module ${module} may be declared, not ${d.kind} ${d.name}: Providers and other modules ${operators}`,
        },
      ];
    }
    if (!stored)
      return [
        {
          document,
          path: "",
          message: `module ${module} has not been declared by the operator yet: a part may only declare again a module the operator declared`,
        },
      ];
    if (!stored.parts.some((p) => p.name === part && p.node === from.node)) {
      return [
        {
          document,
          path: "",
          message: `module ${module} has no part ${part} on node ${from.node}: only a part of the module, on its own node's subject, may declare it again`,
        },
      ];
    }
    const same = (a: unknown, b: unknown) => JSON.stringify(a ?? null) === JSON.stringify(b ?? null);
    const problems: Problem[] = [];
    if (!same(d.parts, stored.parts))
      problems.push({ document, path: "parts", message: `a part may not change module ${module}'s parts: which parts run where ${operators}` });
    if (!same(d.allowKinds, stored.allowKinds))
      problems.push({ document, path: "allowKinds", message: `a part may not change the kinds module ${module}'s parts may declare: they ${operators}` });
    const allowed = new Set(stored.allowKinds ?? []);
    const allowedText = allowed.size ? [...allowed].join(", ") : "no kind";
    const partsOf = (r: RequirementDoc, doc: ModuleDoc) => r.parts ?? doc.parts.map((p) => p.name);
    /** Why part `part` may not add, change or remove `r` (of `doc`), or undefined when it is its own. */
    const notOwn = (r: RequirementDoc, doc: ModuleDoc, verb: string): string | undefined => {
      if (!allowed.has(r.kind))
        return `part ${part} may not ${verb} requirement ${r.name}, a ${r.kind}: the operator allows module ${module}'s parts to declare ${allowedText} (the module's allowKinds)`;
      if (!partsOf(r, doc).includes(part))
        return `part ${part} may not ${verb} requirement ${r.name}: it is not among its parts (${partsOf(r, doc).join(", ")}), and a part may change only the requirements it is in`;
      return undefined;
    };
    const before = new Map(stored.requires.map((r) => [r.name, r]));
    const after = new Set(d.requires.map((r) => r.name));
    d.requires.forEach((r, i) => {
      const old = before.get(r.name);
      if (old && same(r, old)) return;
      const why = (old && notOwn(old, stored, "change")) ?? notOwn(r, d, old ? "change" : "add");
      if (why) problems.push({ document, path: `requires[${i}]`, message: why });
    });
    for (const old of stored.requires) {
      if (after.has(old.name)) continue;
      const why = notOwn(old, stored, "remove");
      if (why) problems.push({ document, path: "requires", message: why });
    }
    return problems;
  });
}

/** The part an apply on a part's subject comes from: the subject names it, never the body. */
export interface ApplyingPart {
  module: string;
  node: string;
  part: string;
}

/** The part of apply subject `subject` (`mesh.api.apply.<module>.<node>.<part>`), or undefined for any other. */
export function partOfApplySubject(subject: string): ApplyingPart | undefined {
  const prefix = `${subjects.apply}.`;
  if (!subject.startsWith(prefix)) return undefined;
  const [module, node, part, ...rest] = subject.slice(prefix.length).split(".");
  if (rest.length || !module || !node || !part || ![module, node, part].every(isValidName)) return undefined;
  return { module, node, part };
}
