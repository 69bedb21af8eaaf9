/**
 * `meshctl apply -f FILE…`: validate the files here, then send their documents to the resolver,
 * which stores all of a request or none: in one request when they fit in one
 * ({@link Limits.documents}, {@link Limits.applyRequestBytes}), otherwise in several, one after
 * another, each all or nothing; when one fails, meshctl says exactly which documents are stored.
 */
import {
  ApplyReply,
  Buckets,
  ErrorReply,
  Grant,
  Kinds,
  Limits,
  ModuleStates,
  formatBytes,
  keys,
  subjects,
  type AppliedDocument,
  type ManifestDoc,
} from "@mesh/shared";
import { entryJson, openBucket, readJson, type NatsConnection, type Store } from "@mesh/shared/runtime";
import { CliError } from "./cli-error.js";
import { ExitCodes } from "./exit-codes.js";
import { formatFileProblems, loadManifestFiles, locateDocument, type FileProblem, type FileReader, type ManifestFile } from "./manifest-files.js";
import { manifestRevisionOf, modulesRevisionNow, waitLine, type ModuleTarget } from "./module-wait.js";
import { isRequestTimeout, rootMessage } from "./nats-errors.js";
import { requestService } from "./service-request.js";
import type { Output } from "./output.js";
import { remainingMs, retrying, type RetryPolicy } from "./retry.js";
import { makeStyle } from "./style.js";
import { followModules, reportTimeout } from "./wait-command.js";

/** How long meshctl waits for the resolver's reply to an apply. */
export const APPLY_TIMEOUT_MS = 10_000;

export interface ApplyOptions {
  /** Files to apply; `-` is standard input. */
  files: string[];
  json?: boolean;
  /** How long one attempt waits for the resolver; default {@link APPLY_TIMEOUT_MS}. */
  timeoutMs?: number;
  /** How long to keep sending while the resolver does not answer or asks for a retry (apply is idempotent). */
  policy?: RetryPolicy;
  reader?: FileReader;
  /** Apply what the control plane protects itself from: a module `mesh` without a requirement it had. */
  force?: boolean;
  /**
   * Then wait until every module applied is settled (Ready or NothingRequired) from the
   * manifest just stored, until `untilMs` (`timeoutMs` from the start, for messages); fail at
   * once when one is Unsatisfiable from it.
   */
  wait?: { untilMs: number; timeoutMs: number; store: () => Promise<Store> };
}

/** The states in which `apply --wait` takes a module as settled. */
export const SETTLED_STATES = [ModuleStates.Ready, ModuleStates.NothingRequired] as const;

/**
 * The resolver's answer: everything stored, or the problems of the request refused; `stored`
 * lists what earlier requests of the same apply stored (when the documents took several).
 */
export type ApplyOutcome = { ok: true; accepted: AppliedDocument[] } | { ok: false; problems: FileProblem[]; stored?: AppliedDocument[] };

/** One request's share of the documents: `count` of them from index `from` (across the files), encoded. */
export interface ApplyBatch {
  from: number;
  count: number;
  payload: string;
}

/**
 * Splits the documents of `files` into requests of at most {@link Limits.documents} documents
 * and {@link Limits.applyRequestBytes} bytes each, in order. Throws a usage {@link CliError}
 * for a single document too large for any request. Pure.
 */
export function applyBatches(files: readonly ManifestFile[], force = false): ApplyBatch[] {
  const documents = files.flatMap((f) => f.documents);
  const source = files.map((f) => f.source).join(", ");
  const encode = (docs: readonly ManifestDoc[]) => JSON.stringify({ documents: docs, source, ...(force ? { force } : {}) });
  const overhead = Buffer.byteLength(encode([]));
  const batches: ApplyBatch[] = [];
  let from = 0;
  let bytes = overhead;
  const close = (to: number) => {
    if (to > from) batches.push({ from, count: to - from, payload: encode(documents.slice(from, to)) });
    from = to;
    bytes = overhead;
  };
  documents.forEach((doc, i) => {
    const size = Buffer.byteLength(JSON.stringify(doc));
    if (overhead + size > Limits.applyRequestBytes) {
      const loc = locateDocument(files, i);
      throw new CliError(
        `document ${loc.document + 1} of ${loc.source} makes a request of ${overhead + size} bytes; one apply may be at most ${Limits.applyRequestBytes} (${formatBytes(Limits.applyRequestBytes)}): make it smaller`,
        ExitCodes.Usage,
      );
    }
    // With the comma before it, unless it is the first of its request.
    if (i - from >= Limits.documents || bytes + size + 1 > Limits.applyRequestBytes) close(i);
    bytes += size + (i > from ? 1 : 0);
  });
  close(documents.length);
  return batches;
}

/**
 * Sends validated files to the resolver: in one apply request when they fit in one, otherwise
 * in several ({@link applyBatches}), one after another. Documents are numbered across the files
 * in order; problems in a reply are mapped back to their file. A missing resolver, a timeout or
 * an error reply is a {@link CliError} that says what to do and, when the documents took
 * several requests or the resolver did not answer, exactly which documents are stored (read
 * back from the store). With `policy`, what may succeed when sent again (no resolver answers
 * yet, no reply in time, a refusal marked retryable) is sent again until its deadline: storing
 * the same documents twice changes nothing.
 */
export async function sendApply(
  nc: NatsConnection,
  files: readonly ManifestFile[],
  timeoutMs = APPLY_TIMEOUT_MS,
  policy?: RetryPolicy,
  force = false,
): Promise<ApplyOutcome> {
  const batches = applyBatches(files, force);
  const accepted: AppliedDocument[] = [];
  for (const batch of batches) {
    let outcome: ApplyOutcome;
    try {
      outcome = policy
        ? await retrying("apply", policy, () => sendApplyOnce(nc, files, batch, Math.min(timeoutMs, remainingMs(policy))))
        : await sendApplyOnce(nc, files, batch, timeoutMs);
    } catch (e) {
      if (!(e instanceof CliError) || (batches.length === 1 && !isTimeout(e))) throw e;
      throw new CliError(`${e.message}\n${await storedReport(nc, files, accepted.length)}`, e.exitCode, { cause: e, retryable: e.retryable });
    }
    if (!outcome.ok) {
      if (accepted.length === 0) return outcome;
      // The earlier requests were stored: say so beside the problems of this one.
      return { ok: false, problems: outcome.problems, stored: accepted };
    }
    accepted.push(...outcome.accepted);
  }
  return { ok: true, accepted };
}

/** Whether a failed apply request is one whose documents may or may not be stored (no reply in time). */
function isTimeout(e: CliError): boolean {
  return isRequestTimeout(e.cause);
}

/**
 * Which documents of `files` are stored now, as the store says (each compared with what the
 * file says): the first `known` were acknowledged by the resolver; the others are read back.
 * One line per document, `module/a stored` or `module/b not stored`.
 */
async function storedReport(nc: NatsConnection, files: readonly ManifestFile[], known: number): Promise<string> {
  const documents = files.flatMap((f) => f.documents);
  const lines: string[] = documents.slice(0, known).map((d) => `${d.kind.toLowerCase()}/${d.name} stored`);
  try {
    const [manifests, providers] = await Promise.all([openBucket(nc, Buckets.manifests), openBucket(nc, Buckets.providers)]);
    const rest = await Promise.all(
      documents.slice(known).map(async (d) => {
        const e = await (d.kind === "Module" ? manifests : providers).get(d.name);
        const same = e?.operation === "PUT" && e.length > 0 && JSON.stringify(entryJson(e)) === JSON.stringify(d);
        return `${d.kind.toLowerCase()}/${d.name} ${same ? "stored" : "not stored"}`;
      }),
    );
    lines.push(...rest);
  } catch (e) {
    lines.push(`(the rest, ${documents.length - known} documents, could not be read back: ${rootMessage(e)}; they may or may not be stored)`);
  }
  const stored = lines.filter((l) => l.endsWith(" stored") && !l.endsWith(" not stored")).length;
  return [`Of the ${documents.length} documents, ${stored} are stored as the files say, ${documents.length - stored} are not:`, ...lines].join("\n");
}

/** One apply request: `batch`, a share of the encoded documents of `files`. */
async function sendApplyOnce(nc: NatsConnection, files: readonly ManifestFile[], batch: ApplyBatch, timeoutMs: number): Promise<ApplyOutcome> {
  const body = await requestService(nc, subjects.apply, batch.payload, {
    what: "apply",
    service: "resolver",
    timeoutMs,
    encoded: true,
    ifTimedOut:
      "it may be overloaded or stuck: look at its log (.mesh/logs/resolver.log under meshctl up).\n" +
      "The documents may or may not be stored; applying the same files again is safe.",
  });
  const parsed = ApplyReply.safeParse(body);
  if (parsed.success) {
    if (parsed.data.ok) return { ok: true, accepted: parsed.data.accepted };
    return {
      ok: false,
      problems: parsed.data.problems.map((p) => ({ ...locateDocument(files, batch.from + p.document), path: p.path, message: p.message })),
    };
  }
  const error = ErrorReply.safeParse((body as { error?: unknown } | null)?.error);
  if (error.success) {
    const retry = error.data.retryable ? " Trying again later may succeed." : "";
    throw new CliError(`the resolver refused the request (${error.data.code}): ${error.data.message}.${retry}`, undefined, { retryable: error.data.retryable });
  }
  throw new CliError("the resolver sent a reply meshctl does not understand; are meshctl and the resolver of the same version?");
}

/** `module/shop created`, one line per document. */
export function formatAccepted(accepted: readonly AppliedDocument[], color = false): string {
  const s = makeStyle(color);
  return accepted
    .map((a) => {
      const action = a.action === "unchanged" ? s.dim(a.action) : s.ok(a.action);
      return `${a.kind.toLowerCase()}/${a.name} ${action}`;
    })
    .join("\n");
}

/**
 * Prints an apply outcome and returns the exit code. With `json` the outcome goes to standard
 * output as JSON; problems are listed on standard error either way.
 */
export function reportApply(outcome: ApplyOutcome, json: boolean, out: Output): number {
  if (json) out.out(JSON.stringify(outcome, null, 2));
  if (outcome.ok) {
    if (json) return ExitCodes.Ok;
    if (outcome.accepted.length) out.out(formatAccepted(outcome.accepted, out.color));
    return ExitCodes.Ok;
  }
  out.err(formatFileProblems(outcome.problems));
  if (outcome.stored?.length) {
    out.err(
      `rejected: the documents took several requests; the earlier ones stored ${outcome.stored.length} documents (listed below), the rest were not stored.`,
    );
    out.err(formatAccepted(outcome.stored, out.color));
  } else {
    out.err("rejected: nothing was applied.");
  }
  return ExitCodes.Failure;
}

/**
 * The apply command. Reads and checks the files first: when any has a problem, they are
 * listed on standard error and nothing is sent (`connect` is not even called). Returns the
 * exit code: 0 when applied, 1 when rejected.
 */
export async function runApply(connect: () => Promise<NatsConnection>, opts: ApplyOptions, out: Output): Promise<number> {
  const loaded = await loadManifestFiles(opts.files, opts.reader);
  if (!loaded.ok) return reportApply({ ok: false, problems: loaded.problems }, Boolean(opts.json), out);
  const nc = await connect();
  const store = opts.wait ? await opts.wait.store() : undefined;
  // Module records written after this are the resolver's answer to this apply.
  const before = store ? await modulesRevisionNow(store) : 0;
  const outcome = await sendApply(nc, loaded.files, opts.timeoutMs, opts.policy, opts.force);
  if (outcome.ok) for (const line of await widerIdentities(nc, loaded.files).catch(() => [])) out.err(line);
  if (!opts.wait || !store || !outcome.ok) return reportApply(outcome, Boolean(opts.json), out);
  if (!opts.json) reportApply(outcome, false, out);
  return waitForApplied(store, outcome.accepted, before, opts.wait, Boolean(opts.json), out);
}

/**
 * What to say of the `nats.user` grants of the applied modules that were issued before every
 * identity was confined to its own inbox: they keep their wider permissions (subscribing to
 * `_INBOX.>`, answering any request) until reissued, and one command reissues them all.
 * Read by key, one grant per requirement; a grant not provisioned yet says nothing.
 */
export async function widerIdentities(nc: NatsConnection, files: readonly ManifestFile[]): Promise<string[]> {
  const wanted = files
    .flatMap((f) => f.documents)
    .flatMap((d) => (d.kind === "Module" ? d.requires.filter((r) => r.kind === Kinds.NatsUser).map((r) => keys.grant(d.name, r.name)) : []));
  if (wanted.length === 0) return [];
  const kv = await openBucket(nc, Buckets.grants);
  const wide: string[] = [];
  for (const key of wanted) {
    const g = (await readJson(kv, key, Grant))?.value;
    if (g?.resource.subscribe?.split(",").includes("_INBOX.>")) wide.push(g.id);
  }
  if (wide.length === 0) return [];
  return [
    `note: ${wide.join(", ")} ${wide.length === 1 ? "was" : "were"} issued before each identity was confined to its own inbox: until reissued, ${wide.length === 1 ? "it" : "each"} may still subscribe to _INBOX.> (other identities' replies and deliveries) and answer any request it hears.`,
    `      Reissue every nats.user identity through the ordinary rotation, no holder locked out: meshctl rotate --kind ${Kinds.NatsUser} --wait`,
    `      (applications then connect with their binding's inboxPrefix; one that answers requests asks for allowResponses: true)`,
  ];
}

/**
 * `apply --wait` once the documents are stored: follows every module among `accepted` until it
 * is settled. Exit codes: 0 all settled; 1 one is Unsatisfiable (named, with why); 3 or 9 as
 * `wait` on timeout. With `json` prints `{"ok":true,"accepted":[…],"wait":{"outcome","modules":[…]}}`.
 */
async function waitForApplied(
  store: Store,
  accepted: readonly AppliedDocument[],
  before: number,
  wait: NonNullable<ApplyOptions["wait"]>,
  json: boolean,
  out: Output,
): Promise<number> {
  const targets: ModuleTarget[] = await Promise.all(
    accepted
      .filter((a) => a.kind === "Module")
      .map(async (a) => {
        const manifestRevision = await manifestRevisionOf(store, a.name);
        return {
          module: a.name,
          accept: SETTLED_STATES,
          failOn: [ModuleStates.Unsatisfiable],
          freshAfter: before,
          ...(manifestRevision ? { manifestRevision } : {}),
        };
      }),
  );
  const { results } = targets.length ? await followModules(store, targets, wait.untilMs, out, json) : { results: [] };
  const failed = results.find((r) => r.outcome === "failed");
  const print = (outcome: string) => out.out(JSON.stringify({ ok: true, accepted, wait: { outcome, modules: results } }, null, 2));
  if (failed) {
    if (json) print("failed");
    else out.err(`meshctl: ${waitLine(failed)}\nThe documents are applied; meshctl explain ${failed.module} says what would satisfy it.`);
    return ExitCodes.Failure;
  }
  if (results.every((r) => r.outcome === "met")) {
    if (json) print("settled");
    else for (const r of results) out.out(waitLine(r));
    return ExitCodes.Ok;
  }
  const { code } = await reportTimeout(store, results, "settled (Ready or NothingRequired)", wait.timeoutMs, out, json);
  if (json) print("timedOut");
  return code;
}
