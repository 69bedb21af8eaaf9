/**
 * Declaring a module's (or a provider's) manifest from TypeScript: the same request on the
 * same subject that `meshctl apply` sends, and that a module in any language can send with a
 * plain NATS client.
 */
import { ApplyReply, ErrorCodes, MeshError, formatProblems, subjects, validateDocuments, type ApplyRequest, type Problem } from "@mesh/shared";
import { errorFromReply, requestJson, type NatsConnection } from "@mesh/shared/runtime";
import { partOfConnection } from "./connect-with-identity.js";

/** A manifest the mesh refused, with every problem by document and path. Nothing of it was stored. */
export class ManifestRejectedError extends MeshError {
  constructor(
    readonly problems: readonly Problem[],
    source?: string,
  ) {
    super(ErrorCodes.InvalidManifest, `the manifest${source ? ` ${source}` : ""} was rejected, nothing was stored:\n${formatProblems(problems, source)}`);
  }
}

/** True when `e` is a {@link ManifestRejectedError}. */
export function isManifestRejectedError(e: unknown): e is ManifestRejectedError {
  return e instanceof ManifestRejectedError;
}

export interface DeclareOptions {
  /** Where the documents come from (a file name), shown in messages. */
  source?: string;
  /** How long to wait for the resolver; default 10 s. */
  timeoutMs?: number;
}

/** What the mesh accepted: each document with `created`, `updated` or `unchanged`. */
export type Declared = Extract<ApplyReply, { ok: true }>;

/**
 * Declares manifest documents — decoded objects, or the text of a YAML/JSON manifest file —
 * with an apply request on `mesh.api.apply` (on a part's identity, its own module on the part's
 * subject, where it may change only the requirements that are its own). They are validated
 * here first, and again by the resolver, which stores all of them or none.
 *
 * Throws {@link ManifestRejectedError} listing every problem when the manifest is invalid;
 * a {@link MeshError} `Unavailable` (retryable) when no resolver answers; the resolver's own
 * error otherwise.
 */
export async function declare(nc: NatsConnection, manifest: readonly unknown[] | string, opts: DeclareOptions = {}): Promise<Declared> {
  // The YAML parser is loaded for a file's text alone: a module that declares objects never loads it.
  const parsed = typeof manifest === "string" ? (await import("@mesh/shared/manifest-text")).parseManifestText(manifest) : validateDocuments(manifest);
  if (!parsed.ok) throw new ManifestRejectedError(parsed.problems, opts.source);
  const req: ApplyRequest = { documents: parsed.documents, ...(opts.source ? { source: opts.source } : {}) };
  // On a part's identity, its own module goes on the part's subject, the one it may publish to.
  const part = partOfConnection(nc);
  const own = part !== undefined && parsed.documents.length > 0 && parsed.documents.every((d) => d.kind === "Module" && d.name === part.module);
  const subject = own ? subjects.applyPart(part.module, part.node, part.part) : subjects.apply;
  const body = await requestJson(nc, subject, req, { service: "resolver", timeoutMs: opts.timeoutMs ?? 10_000 });
  const refused = errorFromReply(body, "the resolver refused the manifest: ");
  if (refused) throw refused;
  const reply = ApplyReply.safeParse(body);
  if (!reply.success) throw new MeshError(ErrorCodes.Internal, `the reply on ${subject} does not match its schema`);
  if (!reply.data.ok) throw new ManifestRejectedError(reply.data.problems, opts.source);
  return reply.data;
}
