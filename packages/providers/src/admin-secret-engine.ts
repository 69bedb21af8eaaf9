/**
 * The side effects around {@link classifyAdminSecret}: for a provider whose admin password is a
 * mesh secret (docs/bootstrap.md, "Provider dependencies"), log in at its server with each generation of
 * that secret the mesh holds, and set the current one there when the server holds another.
 * The provisioner, the verifier and the rotator use it; values go only to the provider's
 * endpoint, and none is logged or put in a message.
 */
import {
  ErrorCodes,
  Grant,
  MeshError,
  REPAIR_HISTORY_LIMIT,
  Rotation,
  adminSecretAdvice,
  adminSecretGenerations,
  classifyAdminSecret,
  errorMessage,
  isMeshError,
  isRotationRunning,
  keys,
  setCondition,
  type AdminSecretFinding,
  type AdminSecretRef,
  type Kind,
  type ProviderDoc,
  type RepairEvent,
  type RepairPolicy,
  RotationStates,
} from "@mesh/shared";
import { mutateJson, readJson, type Store } from "@mesh/shared/runtime";
import type { ProviderAdapter } from "./adapter.js";
import type { AdapterPool } from "./adapter-pool.js";
import type { CredentialStore } from "./credential-store.js";
import { createAdapter } from "./registry.js";

/** What the engine reads and writes: the store (grants, rotations), the credential history, the adapters. */
export interface AdminSecretDeps {
  store: Store;
  credentials: CredentialStore;
  adapters: AdapterPool;
}

/** What a probe of a provider's server found, with the values it may go on with. */
export interface AdminSecretProbe {
  ref: AdminSecretRef;
  finding: AdminSecretFinding;
  /** The secret's `repair:` policy (its grant's; `auto` when left out). */
  policy: RepairPolicy;
  /** Whether a rotation of the secret runs. */
  rotating: boolean;
  /** The password of each generation tried that the mesh holds; never logged. */
  passwords: ReadonlyMap<number, string>;
}

/** A login-only adapter of `doc` for a kind whose adapter has the admin verbs; undefined when none has. */
function adminVerbsAdapter(doc: ProviderDoc, kind?: Kind): ProviderAdapter | undefined {
  for (const k of kind ? [kind] : doc.serves) {
    try {
      const a = createAdapter(k, {
        name: doc.name,
        node: doc.node,
        endpoint: doc.endpoint,
        ...(doc.admin ? { admin: { username: doc.admin.username } } : {}),
        ...(doc.options ? { options: doc.options } : {}),
      });
      if (a.loginAdmin && a.setAdminPassword) return a;
      void a.close();
    } catch {
      // a kind without an adapter, or an endpoint it cannot use: try the next
    }
  }
  return undefined;
}

/**
 * How long after a generation of an admin secret is written ahead it counts as being staged by
 * a rotation that has not recorded itself yet, rather than left behind by one that died.
 */
export const ADMIN_SECRET_STAGING_GRACE_MS = 120_000;

/** Whether a credential record was written less than {@link ADMIN_SECRET_STAGING_GRACE_MS} ago. */
function writtenMomentsAgo(record: { createdAt: string } | undefined): boolean {
  return record !== undefined && Date.now() - Date.parse(record.createdAt) < ADMIN_SECRET_STAGING_GRACE_MS;
}

/**
 * Logs in at `doc`'s server as its admin user with each generation of its admin secret `ref`
 * that the mesh holds ({@link adminSecretGenerations}, stopping at the first accepted) and
 * says what the server holds. Undefined when the secret has no grant or no generation yet, or
 * when no adapter of the provider can log in as its admin.
 */
export async function probeAdminSecret(deps: AdminSecretDeps, doc: ProviderDoc, ref: AdminSecretRef, kind?: Kind): Promise<AdminSecretProbe | undefined> {
  const key = keys.grant(ref.module, ref.requirement);
  const grant = (await readJson(deps.store.kv.grants, key, Grant))?.value;
  if (!grant || grant.generation < 1) return undefined;
  const rotation = (await readJson(deps.store.kv.rotations, key, Rotation))?.value;
  // A rotation from the grant's generation set `to` at the server: while it runs, and also once it
  // committed, since the grant read above may predate the commit's write of it (the rotator moves
  // the grant to `to`, then marks the rotation Committed). Without the second case a verifier
  // whose two reads straddled a commit took `to` for a divergence and set `from` back.
  const rotated =
    rotation && rotation.from === grant.generation && (rotation.state === RotationStates.Committed || isRotationRunning(rotation)) ? rotation.to : undefined;
  const adapter = adminVerbsAdapter(doc, kind);
  if (!adapter) return undefined;
  try {
    const passwords = new Map<number, string>();
    const trials: Array<{ generation: number; result: Awaited<ReturnType<NonNullable<ProviderAdapter["loginAdmin"]>>> }> = [];
    // Read once each; k+1 (tried right after k when no rotation is recorded) is kept for the staging check below.
    const records = new Map<number, { createdAt: string }>();
    for (const generation of adminSecretGenerations(grant.generation, rotated)) {
      const cred = await deps.credentials.read(ref.module, ref.requirement, generation);
      if (cred) records.set(generation, cred.record);
      const password = cred?.bindings?.[ref.key] ?? cred?.secret[ref.key];
      if (typeof password !== "string") continue;
      passwords.set(generation, password);
      const result = await adapter.loginAdmin!({ password });
      trials.push({ generation, result });
      if (result.ok) break;
      if (result.reason === "unreachable") break; // the others would not get through either
    }
    // And a rotation still staging sets k+1 at the server before it records itself (staging.ts:
    // the holders are told nothing until it has): a k+1 written ahead moments ago is that one, not
    // one a rotation left behind. Past the grace it is, and is repaired.
    const ahead = grant.generation + 1;
    const staged = rotated ?? (writtenMomentsAgo(records.get(ahead)) ? ahead : undefined);
    const finding = classifyAdminSecret({
      provider: doc.name,
      endpoint: doc.endpoint,
      secret: ref.grant,
      current: grant.generation,
      ...(staged ? { staged } : {}),
      trials,
    });
    return { ref, finding, policy: grant.repair ?? "auto", rotating: isRotationRunning(rotation), passwords };
  } finally {
    await adapter.close();
  }
}

/**
 * Sets generation `to` of `probe`'s secret at `doc`'s server, logging in with the generation
 * the server accepts (`probe.finding` must have found one). Throws a MeshError saying why when
 * it cannot.
 */
export async function setAdminSecret(doc: ProviderDoc, probe: AdminSecretProbe, to: number, next: string, kind?: Kind): Promise<void> {
  const f = probe.finding;
  const from = f.state === "diverged" ? f.accepted : f.state === "current" || f.state === "staged" ? f.generation : undefined;
  const current = from === undefined ? undefined : probe.passwords.get(from);
  if (current === undefined) {
    throw new MeshError(
      ErrorCodes.ProviderRejected,
      `cannot set generation ${to} of ${probe.ref.grant} at provider ${doc.name}: ${"message" in f ? f.message : "the server accepts no generation the mesh holds"}`,
    );
  }
  if (from === to) return;
  const adapter = adminVerbsAdapter(doc, kind);
  if (!adapter)
    throw new MeshError(
      ErrorCodes.ProviderMisconfigured,
      `provider ${doc.name}: no adapter of its kinds (${doc.serves.join(", ")}) can set its admin password`,
    );
  try {
    await adapter.setAdminPassword!({ current, next });
  } finally {
    await adapter.close();
  }
}

/** Appends `event` to the repair history of the secret's grant (the newest {@link REPAIR_HISTORY_LIMIT} kept). */
async function recordRepair(store: Store, ref: AdminSecretRef, event: RepairEvent): Promise<void> {
  await mutateJson(store.kv.grants, keys.grant(ref.module, ref.requirement), Grant, (cur) =>
    cur ? { ...cur, repairs: [...(cur.repairs ?? []), event].slice(-REPAIR_HISTORY_LIMIT) } : undefined,
  );
}

/**
 * Writes the diagnosis on the secret's grant before a repair, as the verifier does: its
 * `Verified` condition False `CredentialDiverged`, naming both generations and what the mesh
 * does. The verifier checks the grant again once the repair is recorded, and sets it True.
 */
async function recordDiagnosis(store: Store, probe: AdminSecretProbe & { finding: { state: "diverged" } }): Promise<void> {
  const f = probe.finding;
  await mutateJson(store.kv.grants, keys.grant(probe.ref.module, probe.ref.requirement), Grant, (cur) => {
    if (!cur || cur.generation !== f.current) return undefined;
    const message = `${f.message}; ${adminSecretAdvice(f, probe.ref.grant, probe.policy)}`;
    const conditions = setCondition(cur.conditions, { type: "Verified", status: "False", reason: "CredentialDiverged", message });
    return conditions === cur.conditions ? undefined : { ...cur, conditions };
  });
}

/**
 * Repairs a diverged admin secret: logs in with the accepted generation, sets the current one,
 * and records the diagnosis, then the repair, on the secret's grant (`by`: who repaired).
 * Returns the repair event; a failed repair is recorded too, then thrown.
 */
export async function repairAdminSecret(
  deps: AdminSecretDeps,
  doc: ProviderDoc,
  probe: AdminSecretProbe,
  by: string,
  /** `record: false`: the caller records the repair itself (the verifier, in its own words). */
  opts: { requested?: boolean; kind?: Kind; record?: boolean } = {},
): Promise<RepairEvent> {
  const f = probe.finding;
  if (f.state !== "diverged")
    throw new MeshError(ErrorCodes.Internal, `repairAdminSecret called for ${probe.ref.grant} at ${doc.name}, which has not diverged (${f.state})`);
  const next = probe.passwords.get(f.current);
  const at = new Date().toISOString();
  const did = `logged in with generation ${f.accepted} and set generation ${f.current} at the server`;
  const base = { at, by, action: "reapply" as const, reason: "CredentialDiverged" as const, generation: f.current, requested: opts.requested ?? false };
  if (opts.record !== false) await recordDiagnosis(deps.store, { ...probe, finding: f });
  try {
    if (next === undefined) throw new MeshError(ErrorCodes.NotFound, `generation ${f.current} of ${probe.ref.grant} is not in the credential history`);
    await setAdminSecret(doc, probe, f.current, next, opts.kind);
  } catch (e) {
    if (opts.record !== false)
      await recordRepair(deps.store, probe.ref, {
        ...base,
        outcome: "failed",
        message: `CredentialDiverged: ${f.message} — could not log in with generation ${f.accepted} and set generation ${f.current} at the server: ${errorMessage(e)}`,
      });
    throw e;
  }
  const event: RepairEvent = { ...base, outcome: "repaired", message: `CredentialDiverged: ${f.message} — ${did}` };
  if (opts.record !== false) await recordRepair(deps.store, probe.ref, event);
  return event;
}

/** Repairs in progress, per adapter pool and provider: concurrent reconciles of one provider share one. */
const repairing = new WeakMap<AdapterPool, Map<string, Promise<string>>>();

/**
 * Runs `fn` with `doc`'s adapter of `kind`. When that fails as a wrong admin password would
 * (`ProviderMisconfigured`, a file not readable included) and the provider's admin password is
 * a mesh secret, finds which generation of it the server accepts and:
 * - the current one, or the one a running rotation stages, which the file does not hold yet:
 *   runs `fn` again with it;
 * - another one (the data directory is older): under the secret's `repair: auto`, logs in with
 *   it, sets the current one at the server, records the repair on the secret's grant (`by`),
 *   and runs `fn` again; under `repair: report` (or while the secret rotates), throws
 *   `AdminSecretDiverged`, whose message names both generations and what to run;
 * - none: throws the first error, with what was found added; unreachable: `ProviderUnreachable`.
 */
export async function withAdminSecret<T>(
  deps: AdminSecretDeps,
  kind: Kind,
  doc: ProviderDoc,
  by: string,
  fn: (adapter: ProviderAdapter) => Promise<T>,
): Promise<T> {
  try {
    return await fn(deps.adapters.get(kind, doc));
  } catch (e) {
    const ref = isMeshError(e, ErrorCodes.ProviderMisconfigured) ? deps.adapters.adminSecret(doc) : undefined;
    if (!ref) throw e;
    const password = await passwordThatWorks(deps, kind, doc, ref, by, e);
    return fn(deps.adapters.get(kind, doc, { adminPassword: password }));
  }
}

/** The admin password of `doc` that its server accepts now, repairing by policy first; see {@link withAdminSecret}. */
async function passwordThatWorks(deps: AdminSecretDeps, kind: Kind, doc: ProviderDoc, ref: AdminSecretRef, by: string, first: unknown): Promise<string> {
  let byProvider = repairing.get(deps.adapters);
  if (!byProvider) repairing.set(deps.adapters, (byProvider = new Map()));
  const running = byProvider.get(doc.name);
  if (running) return running;
  const work = (async () => {
    const probe = await probeAdminSecret(deps, doc, ref, kind);
    if (!probe) throw first;
    const f = probe.finding;
    switch (f.state) {
      case "current":
      case "staged": {
        const password = probe.passwords.get(f.generation)!;
        if (configuredPassword(deps, doc) === password) throw first; // the admin password is not what fails
        return password;
      }
      case "diverged": {
        const advice = adminSecretAdvice(f, ref.grant, probe.policy);
        if (probe.policy === "report" || probe.rotating) {
          const why = probe.rotating
            ? `a rotation of ${ref.grant} is in progress, so the mesh does not repair it now; it looks again when the rotation ends`
            : advice;
          throw new MeshError(ErrorCodes.AdminSecretDiverged, `${f.message}; ${why}`, { retryable: true });
        }
        await repairAdminSecret(deps, doc, probe, by, { kind });
        return probe.passwords.get(f.current)!;
      }
      case "unreachable":
        throw new MeshError(ErrorCodes.ProviderUnreachable, f.message, { retryable: true, cause: first });
      default:
        throw new MeshError(ErrorCodes.ProviderMisconfigured, `${errorMessage(first)}; ${f.message}`, { cause: first });
    }
  })();
  byProvider.set(doc.name, work);
  try {
    return await work;
  } finally {
    byProvider.delete(doc.name);
  }
}

/** The admin password the document's source holds now, or undefined when it cannot be read. */
function configuredPassword(deps: AdminSecretDeps, doc: ProviderDoc): string | undefined {
  try {
    return deps.adapters.configuredAdminPassword(doc);
  } catch {
    return undefined;
  }
}
