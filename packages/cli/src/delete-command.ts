/**
 * `meshctl delete module|provider NAME…`, `meshctl delete -f FILE…` (the documents named there)
 * and `meshctl delete retained GRANT…`: asks the resolver to delete, then follows the grants
 * of what was deleted until each is revoked at its provider (or gone), and exits 0 then. What
 * remains after that (bindings on nodes whose agent is not running) is named, and
 * `meshctl status` keeps showing it until it is done.
 */
import { DeleteReply, Grant, dropsResource, isUnneeded, keys, parseGrantId, removalRemains, revocationDue, subjects, type DeleteRequest } from "@mesh/shared";
import { listJson, readJson, type Store } from "@mesh/shared/runtime";
import { CliError } from "./cli-error.js";
import { formatFileProblems, loadManifestFiles, type FileReader } from "./manifest-files.js";
import { ExitCodes } from "./exit-codes.js";
import { notUnderstood, refusal, requestService } from "./service-request.js";
import type { Output } from "./output.js";
import { retrying, remainingMs, type RetryPolicy } from "./retry.js";

export interface DeleteOptions {
  request: DeleteRequest;
  json?: boolean;
  /** How long to keep sending the request while no resolver answers. */
  policy: RetryPolicy;
  /** How long to wait for the providers to revoke; default 60 s. */
  waitMs?: number;
}

/** What a delete left of one grant, for the output. */
export interface GrantLeft {
  grant: string;
  /** Revoked at its provider (or gone): what `delete` waits for. */
  revoked: boolean;
  retained: boolean;
  gone: boolean;
  remains: string[];
}

/** The arguments of `meshctl delete WHAT NAME…`, as a request; exit 2 for anything else. */
export function deleteRequestOf(what: string | undefined, names: readonly string[], force: boolean): DeleteRequest {
  if (!what || names.length === 0)
    throw new CliError("say what to delete: meshctl delete module NAME…, delete provider NAME…, delete retained GRANT…, or delete -f FILE…", ExitCodes.Usage);
  if (what === "retained") {
    for (const g of names)
      if (!parseGrantId(g))
        throw new CliError(`${JSON.stringify(g)} is not a grant id: give <module>/<requirement>, as meshctl status lists them`, ExitCodes.Usage);
    return { documents: [], retained: [...names], force };
  }
  const kind = what === "module" || what === "modules" ? "Module" : what === "provider" || what === "providers" ? "Provider" : undefined;
  if (!kind)
    throw new CliError(
      `meshctl delete does not delete ${JSON.stringify(what)}: it deletes a module, a provider, or what a grant retained (delete retained GRANT)`,
      ExitCodes.Usage,
    );
  return { documents: names.map((name) => ({ kind, name })), retained: [], force };
}

/** `meshctl delete -f FILE…`: the modules and providers the files declare, as a request; a file with a problem is a CliError listing them. */
export async function deleteRequestOfFiles(files: readonly string[], force: boolean, reader?: FileReader): Promise<DeleteRequest> {
  const loaded = await loadManifestFiles(files, reader);
  if (!loaded.ok) throw new CliError(formatFileProblems(loaded.problems), ExitCodes.Failure);
  const documents = loaded.files.flatMap((f) => f.documents.map((d) => ({ kind: d.kind, name: d.name })));
  if (!documents.length)
    throw new CliError(`${files.join(", ")} declare${files.length === 1 ? "s" : ""} no module or provider: nothing to delete`, ExitCodes.Usage);
  return { documents, retained: [], force };
}

async function send(store: Store, req: DeleteRequest, timeout: number): Promise<DeleteReply> {
  const body = await requestService(store.nc, subjects.delete, req, {
    what: "delete",
    service: "resolver",
    timeoutMs: timeout,
    ifTimedOut: "nothing may have been deleted (meshctl status shows it)",
  });
  const refused = refusal(body, "resolver");
  if (refused) throw refused;
  const parsed = DeleteReply.safeParse(body);
  if (!parsed.success) throw notUnderstood("resolver");
  return parsed.data;
}

/** The grants whose taking back a delete waits for: every grant of a deleted module, and each retained grant dropped. */
async function grantsLeft(store: Store, req: DeleteRequest): Promise<GrantLeft[]> {
  const left: GrantLeft[] = [];
  const seen = new Set<string>();
  const add = (g: Grant) => {
    if (seen.has(g.id)) return;
    seen.add(g.id);
    // Revoked once the resolver marked it and the provisioner took it back (or it is kept as retained).
    const revoked = Boolean(g.retained) || (isUnneeded(g) && !revocationDue(g));
    left.push({
      grant: g.id,
      revoked,
      // Its data is kept from the revocation on; the grant is marked retained only once its
      // bindings are off the nodes, which the command does not wait for.
      retained: Boolean(g.retained) || (revoked && !dropsResource(g)),
      gone: false,
      remains: removalRemains(g),
    });
  };
  for (const d of req.documents.filter((x) => x.kind === "Module")) {
    for (const g of await listJson(store.kv.grants, Grant, keys.grantsOf(d.name))) add(g.value);
  }
  for (const id of req.retained) {
    const { module, requirement } = parseGrantId(id)!;
    const g = (await readJson(store.kv.grants, keys.grant(module, requirement), Grant))?.value;
    if (g) add(g);
    else left.push({ grant: id, revoked: true, retained: false, gone: true, remains: [] });
  }
  return left;
}

/** Runs the command: 0 once deleted and revoked at the providers; 1 refused (every problem listed); 9 not revoked in time (what remains named). */
export async function runDelete(store: Store, opts: DeleteOptions, out: Output): Promise<number> {
  // Listed before the request: a grant taken back and removed before the first look after it is still said.
  const before = await retrying("read the grants", opts.policy, () => grantsLeft(store, opts.request), { read: true });
  const reply = await retrying("delete", opts.policy, () => send(store, opts.request, Math.min(10_000, remainingMs(opts.policy))));
  if (!reply.ok) {
    if (opts.json) out.out(JSON.stringify({ ok: false, problems: reply.problems }));
    else for (const p of reply.problems) out.err(p.message);
    if (!opts.json) out.err("refused: nothing was deleted.");
    return ExitCodes.Failure;
  }
  if (!opts.json)
    for (const d of reply.deleted) out.out(`${d.kind === "Retained" ? "dropping what was retained of" : `deleted ${d.kind.toLowerCase()}`} ${d.name}`);
  const until = Date.now() + (opts.waitMs ?? 60_000);
  let left = await grantsLeft(store, opts.request);
  // Grants that are gone by the end were taken back and removed: said too, not left out.
  const named = new Set([...before, ...left].map((g) => g.grant));
  let said = "";
  // A deleted module's grants are marked by the resolver, then revoked by the provisioner: follow them.
  for (;;) {
    const waiting = left.filter((g) => !g.revoked || (opts.request.retained.includes(g.grant) && !g.gone));
    const line = waiting.map((g) => `${g.grant} (${g.remains.join("; ") || "taking back"})`).join(", ");
    if (!waiting.length || Date.now() >= until) break;
    if (!opts.json && line !== said) out.err(`waiting: ${line}`);
    said = line;
    await new Promise((r) => setTimeout(r, 250));
    left = await grantsLeft(store, opts.request);
  }
  for (const id of named) if (!left.some((g) => g.grant === id)) left.push({ grant: id, revoked: true, retained: false, gone: true, remains: [] });
  left.sort((a, b) => a.grant.localeCompare(b.grant));
  const notRevoked = left.filter((g) => !g.revoked);
  if (opts.json) {
    out.out(JSON.stringify({ ok: true, deleted: reply.deleted, grants: left }));
  } else {
    for (const g of left) {
      if (!g.revoked) continue;
      const rest = g.remains.length ? `; still to do: ${g.remains.join("; ")}` : "";
      out.out(
        `${g.grant}: ${g.gone ? "revoked at its provider and removed" : g.retained ? `revoked, its data retained (meshctl delete retained ${g.grant} drops it)` : "revoked at its provider"}${rest}`,
      );
    }
  }
  if (notRevoked.length) {
    out.err(
      `not revoked in time: ${notRevoked.map((g) => `${g.grant} (${g.remains.join("; ")})`).join(", ")}; the mesh goes on with it (meshctl status shows it)`,
    );
    return ExitCodes.WaitTimedOut;
  }
  return ExitCodes.Ok;
}
