/**
 * One check of a grant from where the verifier runs, and one repair: the side effects around
 * {@link classifyCheck}. Values of credentials are read from the credential history and go
 * only to the provider; none is logged or returned.
 */
import {
  BUILTIN_SECRET_PROVIDER,
  ErrorCodes,
  Kinds,
  MeshError,
  ProviderDoc,
  errorMessage,
  isMeshError,
  type AdminSecretRef,
  type CheckResult,
  type Grant,
} from "@mesh/shared";
import { listJson, readJson, type Store } from "@mesh/shared/runtime";
import {
  createAdapter,
  probeAdminSecret,
  repairAdminSecret,
  withAdminSecret,
  type AdapterPool,
  type CredentialStore,
  type LoginResult,
  type ProviderAdapter,
} from "@mesh/providers";
import { classifyCheck, type Observation } from "./classify.js";
import type { RepairAction } from "./repair-plan.js";

/** How many generations before the current one a check tries when the current one is rejected. */
export const OLDER_GENERATIONS_TRIED = 8;

/** What a check and a repair need: the store, the credential history, the providers' adapters, their admin passwords' environment. */
export interface CheckDeps {
  store: Store;
  credentials: CredentialStore;
  adapters: AdapterPool;
  env: NodeJS.ProcessEnv;
}

/** The adapter of the grant's provider: with its admin connection when the verifier has its password, else login only. */
async function adapterFor(
  deps: CheckDeps,
  grant: Grant,
): Promise<{ adapter: ProviderAdapter; admin: boolean; adminProblem?: string; close?: () => Promise<void> } | undefined> {
  let doc: ProviderDoc | undefined;
  if (grant.provider !== BUILTIN_SECRET_PROVIDER) {
    // From the listing every check shares (PROVIDERS_LIST_MS old at most); one just registered is read by itself.
    doc =
      (await providerDocs(deps)).find((d) => d.key === grant.provider)?.value ?? (await readJson(deps.store.kv.providers, grant.provider!, ProviderDoc))?.value;
    if (!doc) return undefined; // the resolver re-resolves the grant; nothing to check against
  }
  try {
    return { adapter: deps.adapters.get(grant.kind, doc), admin: true };
  } catch (e) {
    if (!doc || !isMeshError(e, ErrorCodes.ProviderMisconfigured)) throw e;
    // No admin password here (or a broken admin setting): logins still prove the credential.
    const adapter = createAdapter(grant.kind, { name: doc.name, node: doc.node, endpoint: doc.endpoint });
    return { adapter, admin: false, adminProblem: errorMessage(e), close: () => adapter.close() };
  }
}

function observationOf(e: unknown): Observation {
  return { error: isMeshError(e, ErrorCodes.ProviderUnreachable) ? "unreachable" : "failed", message: errorMessage(e) };
}

/**
 * Checks `grant` (which must have a provider and a generation ≥ 1): logs in with the current
 * generation's values, observes the resource and, when the login is rejected, logs in with older
 * generations' (newest first, at most {@link OLDER_GENERATIONS_TRIED}). Returns undefined when
 * there is nothing to check yet (the provider is not registered, or the current generation's
 * values are not recorded). Throws only on a failure of the store.
 */
export async function checkGrant(deps: CheckDeps, grant: Grant, now = () => new Date()): Promise<CheckResult | undefined> {
  const checked = await checkAtProvider(deps, grant, now);
  if (!checked?.ok || grant.kind !== Kinds.Secret) return checked;
  return (await checkAdminSecret(deps, grant, now)) ?? checked;
}

/** How long the verifier keeps the providers catalog it listed: every secret's check asks whether it is a provider's admin password. */
export const PROVIDERS_LIST_MS = 2_000;
const listed = new WeakMap<CheckDeps["store"], { at: number; docs: ReturnType<typeof listJson<ProviderDoc>> }>();

/** The providers catalog, listed at most once per {@link PROVIDERS_LIST_MS} (concurrent checks share one listing). */
function providerDocs(deps: CheckDeps): ReturnType<typeof listJson<ProviderDoc>> {
  const hit = listed.get(deps.store);
  if (hit && Date.now() - hit.at < PROVIDERS_LIST_MS) return hit.docs;
  const docs = listJson(deps.store.kv.providers, ProviderDoc);
  listed.set(deps.store, { at: Date.now(), docs });
  docs.catch(() => listed.delete(deps.store));
  return docs;
}

/** The providers whose admin password is the secret `grant` (installed ones), each with its reference. */
async function adminServersOf(deps: CheckDeps, grant: Grant): Promise<Array<{ doc: ProviderDoc; ref: AdminSecretRef }>> {
  const docs = await providerDocs(deps);
  const out: Array<{ doc: ProviderDoc; ref: AdminSecretRef }> = [];
  for (const { value: doc } of docs) {
    const ref = doc.installed ? deps.adapters.adminSecret(doc) : undefined;
    if (ref?.grant === grant.id) out.push({ doc, ref });
  }
  return out;
}

/**
 * For a secret that is the admin password of providers (docs/bootstrap.md, "Provider dependencies"): which
 * generation each one's server accepts. The first that does not accept the current one (nor
 * the one a rotation stages) decides: `CredentialDiverged` naming both generations, or
 * `CredentialRejected` / `ProviderUnreachable`. Undefined when the secret is no provider's
 * admin password.
 */
async function checkAdminSecret(deps: CheckDeps, grant: Grant, now: () => Date): Promise<CheckResult | undefined> {
  const servers = await adminServersOf(deps, grant);
  if (servers.length === 0) return undefined;
  const accepted: string[] = [];
  for (const { doc, ref } of servers) {
    const probe = await probeAdminSecret(deps, doc, ref);
    if (!probe) continue;
    const f = probe.finding;
    const result = (reason: CheckResult["reason"], message: string, divergedTo?: number): CheckResult => ({
      ok: false,
      reason,
      message,
      generation: grant.generation,
      ...(divergedTo ? { divergedTo } : {}),
      observedAt: now().toISOString(),
    });
    if (f.state === "diverged") return result("CredentialDiverged", f.message, f.accepted);
    if (f.state === "rejected") return result("CredentialRejected", f.message);
    if (f.state === "unreachable") return result("ProviderUnreachable", f.message);
    accepted.push(
      `the server of provider ${doc.name} at ${doc.endpoint} accepts generation ${f.generation}${f.state === "staged" ? " (staged by the rotation under way)" : ""} as its admin password`,
    );
  }
  if (accepted.length === 0) return undefined;
  return {
    ok: true,
    message: `generation ${grant.generation} of ${grant.id} is there; ${accepted.join("; ")}`,
    generation: grant.generation,
    observedAt: now().toISOString(),
  };
}

/** The check of `grant` at its own provider; see {@link checkGrant}. */
async function checkAtProvider(deps: CheckDeps, grant: Grant, now: () => Date): Promise<CheckResult | undefined> {
  const a = await adapterFor(deps, grant);
  if (!a) return undefined;
  try {
    const current = await deps.credentials.read(grant.module, grant.requirement, grant.generation);
    if (!current?.bindings) return undefined;
    const ref = { module: grant.module, requirement: grant.requirement, generation: grant.generation };
    // Login first, then observe: a change made while the check runs (a role dropped) is then
    // seen by the observation that explains the failed login, not missed by one made before it.
    // A login that works decides the check by itself (classifyCheck's first rule), so only a
    // failed one is explained by an observation: an admin query per check was a fifth of a
    // pass's cost at 1,000 grants.
    const login = await a.adapter.login({ bindings: current.bindings });
    const observed: Observation = login.ok
      ? { exists: true, details: {} }
      : a.admin
        ? await a.adapter
            .observe({ grant: ref })
            .then((r): Observation => ({ exists: r.exists, details: r.details, ...(r.missing ? { missing: r.missing } : {}) }), observationOf)
        : { error: "failed", message: a.adminProblem ?? "no admin connection" };
    const older: Array<{ generation: number; result: LoginResult }> = [];
    if (!login.ok && login.reason !== "unreachable") {
      for (let g = grant.generation - 1; g >= Math.max(1, grant.generation - OLDER_GENERATIONS_TRIED); g--) {
        const cred = await deps.credentials.read(grant.module, grant.requirement, g);
        if (!cred?.bindings) continue;
        const result = await a.adapter.login({ bindings: cred.bindings });
        older.push({ generation: g, result });
        if (result.ok) break;
      }
    }
    const c = classifyCheck({
      grant: grant.id,
      provider: grant.provider!,
      generation: grant.generation,
      observed,
      current: login,
      older,
      from: "the verifier",
    });
    return {
      ok: c.ok,
      ...(c.reason ? { reason: c.reason } : {}),
      message: c.message,
      generation: grant.generation,
      ...(c.divergedTo ? { divergedTo: c.divergedTo } : {}),
      observedAt: now().toISOString(),
    };
  } finally {
    await a.close?.();
  }
}

/**
 * Repairs `grant` at its provider: `recreate` and `reapply` both make the resource exist with
 * the current generation's recorded secret (the adapter's `create` is idempotent and applies
 * the credential). Throws a MeshError saying why when it cannot.
 */
export async function repairGrant(deps: CheckDeps, grant: Grant, action: RepairAction, by = "verifier"): Promise<string | undefined> {
  if (grant.kind === Kinds.Secret) {
    const did = await repairAdminSecrets(deps, grant, by);
    if (did) return did;
  }
  const doc = grant.provider === BUILTIN_SECRET_PROVIDER ? undefined : (await readJson(deps.store.kv.providers, grant.provider!, ProviderDoc))?.value;
  if (doc && deps.adapters.adminSecret(doc)) {
    // Its admin password is a mesh secret: its server is reached with the generation it accepts (repaired by that secret's policy).
    const cred = await deps.credentials.read(grant.module, grant.requirement, grant.generation);
    if (!cred) throw new MeshError(ErrorCodes.NotFound, `generation ${grant.generation} of ${grant.id} is not in the credential history`);
    await withAdminSecret(deps, grant.kind, doc, by, (adapter) =>
      adapter.create({
        grant: { module: grant.module, requirement: grant.requirement, generation: grant.generation },
        secret: cred.secret,
        options: grant.options,
        parts: grant.parts,
      }),
    );
    return undefined;
  }
  const a = await adapterFor(deps, grant);
  if (!a) throw new MeshError(ErrorCodes.NotFound, `provider ${grant.provider} is not registered`);
  try {
    if (!a.admin) {
      throw new MeshError(
        ErrorCodes.ProviderMisconfigured,
        `cannot ${action === "recreate" ? "re-create" : "re-apply"} without the provider's admin connection: ${a.adminProblem}`,
      );
    }
    const cred = await deps.credentials.read(grant.module, grant.requirement, grant.generation);
    if (!cred) throw new MeshError(ErrorCodes.NotFound, `generation ${grant.generation} of ${grant.id} is not in the credential history`);
    await a.adapter.create({
      grant: { module: grant.module, requirement: grant.requirement, generation: grant.generation },
      secret: cred.secret,
      options: grant.options,
      parts: grant.parts,
    });
    return undefined;
  } finally {
    await a.close?.();
  }
}

/**
 * Sets the current generation of the secret `grant` at every provider's server that holds an
 * older one, logging in with that one; says what it did, or undefined when no server had
 * diverged. The verifier records the repair itself.
 */
async function repairAdminSecrets(deps: CheckDeps, grant: Grant, by: string): Promise<string | undefined> {
  const done: string[] = [];
  for (const { doc, ref } of await adminServersOf(deps, grant)) {
    const probe = await probeAdminSecret(deps, doc, ref);
    if (probe?.finding.state !== "diverged") continue;
    const f = probe.finding;
    await repairAdminSecret(deps, doc, probe, by, { record: false });
    done.push(`logged in at provider ${doc.name} with generation ${f.accepted} and set generation ${f.current} at its server`);
  }
  return done.length ? done.join("; ") : undefined;
}
