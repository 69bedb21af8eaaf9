/**
 * What `meshctl status` reports: processed modules with their grants, read from KV. The
 * shape of {@link StatusReport} is what `--json` prints; fields may be added, never renamed.
 */
import {
  ErrorCodes,
  Grant,
  ModuleStatus,
  NAME_RULE,
  Rotation,
  Verification,
  dropRetainedHint,
  formatAge,
  isRotationRunning,
  isValidName,
  keys,
  removalRemains,
  type Condition,
  type RepairEvent,
  lastCheck,
} from "@mesh/shared";
import { listJson, readJson, type Store } from "@mesh/shared/runtime";
import { CliError } from "./cli-error.js";
import { ExitCodes } from "./exit-codes.js";
import { meshctlCommand, serviceCommand } from "./paths.js";
import { rotationProgress } from "./rotation-view.js";

/** One grant of a module, as reported. */
export interface StatusGrant {
  /** `<module>/<requirement>`. */
  id: string;
  requirement: string;
  kind: string;
  /** Parts that name the requirement. */
  parts: string[];
  /** Installed parts it is delivered to, with their node. */
  targets: Array<{ part: string; node: string }>;
  provider: string | null;
  generation: number;
  /** Non-secret names of the resource (role, database…). */
  resource: Record<string, string>;
  /** What each holder (`<node>/<part>`) has been delivered. */
  holders: Record<string, { generation: number; deliveredAt: string }>;
  conditions: Condition[];
  /** The verifier's last checks, when it has checked the grant. */
  verification?: StatusVerification;
  /** The verifier's repairs of the grant, oldest first (the newest 20). */
  repairs?: RepairEvent[];
  /** The rotation of the grant that is running (not yet Committed), when there is one. */
  rotation?: StatusRotation;
  /** Being taken back (no installed part needs it), with what remains; or retained data of a removed grant. */
  lifecycle?: StatusLifecycle;
}

/** Where a grant is in its end: being taken back, or kept as retained data. */
export interface StatusLifecycle {
  state: "Deleting" | "Retained";
  since: string;
  /** Why it is taken back (`the module was deleted`…). */
  reason?: string;
  /** What is left to do, in words (nodes whose agent must still remove a binding…). */
  remains: string[];
  /** For retained data: the command that drops it. */
  drop?: string;
}

/** The lifecycle entry of a grant, when it is ending or retained. Pure. */
export function toStatusLifecycle(g: Grant): StatusLifecycle | undefined {
  if (g.retained) return { state: "Retained", since: g.retained.since, remains: [], drop: dropRetainedHint(g) };
  const remains = removalRemains(g);
  if (g.removal) return { state: "Deleting", since: g.removal.requestedAt, reason: g.removal.reason, remains };
  if (remains.length) return { state: "Deleting", since: g.revoked?.at ?? new Date().toISOString(), reason: "no installed part needs it", remains };
  return undefined;
}

/** A running (or Stalled) rotation of a grant, as `meshctl status` reports it. */
export interface StatusRotation {
  /** `<module>/<requirement>#<to>`, what `meshctl trace` takes. */
  id: string;
  from: number;
  to: number;
  state: Rotation["state"];
  /** Holders that confirmed, of `total`. */
  confirmed: number;
  total: number;
  /** Holders that have not confirmed, sorted. */
  missing: string[];
  /** Holders the operator evicted, sorted (when any). */
  evicted?: string[];
  requestedAt: string;
  /** Past it, a rotation still waiting is Stalled. */
  deadline: string;
}

/** The report entry of a running rotation; undefined for none or a Committed one. */
export function toStatusRotation(r: Rotation | undefined): StatusRotation | undefined {
  if (!isRotationRunning(r)) return undefined;
  const { confirmed, total, missing, evicted } = rotationProgress(r);
  return {
    id: r.id,
    from: r.from,
    to: r.to,
    state: r.state,
    confirmed,
    total,
    missing,
    ...(evicted.length ? { evicted } : {}),
    requestedAt: r.requestedAt,
    deadline: r.deadline,
  };
}

/** What the verifier last saw of a grant. */
export interface StatusVerification {
  /** The most recent check from anywhere, and where from (`verifier` or a node): "verified 3 s ago from node-a". */
  lastCheckedAt: string;
  lastCheckedFrom: string;
  /** The verifier's own last check. */
  checkedAt: string;
  checkedBy: string;
  /** Agents' probes by holder `<node>/<part>`. */
  probes: Verification["probes"];
}

/** One processed module, as reported. */
export interface StatusModule {
  module: string;
  state: string;
  /** Why the module is in this state. */
  message: string;
  /** When the state last changed. */
  since: string;
  processedAt: string;
  grants: StatusGrant[];
}

/** Why a module has no state. */
export interface NotProcessedError {
  code: typeof ErrorCodes.NotProcessed;
  module: string;
  message: string;
  /** What is known beyond that: a stored but unprocessed manifest, or none at all. */
  hint: string;
  manifestStored: boolean;
}

/** The whole report; `--json` prints it as is. */
export interface StatusReport {
  modules: StatusModule[];
  /** Modules whose manifest is stored but that the resolver has not processed (yet). */
  unprocessed?: string[];
  error?: NotProcessedError;
}

/** The report entry of a grant. */
export function toStatusGrant(g: Grant, v?: Verification, now = new Date(), r?: Rotation): StatusGrant {
  const verification: StatusVerification | undefined = v && {
    lastCheckedAt: lastCheck(g, v, now.getTime()).at,
    lastCheckedFrom: lastCheck(g, v, now.getTime()).from,
    checkedAt: v.checkedAt,
    checkedBy: v.checkedBy,
    probes: v.probes,
  };
  const rotation = toStatusRotation(r);
  const lifecycle = toStatusLifecycle(g);
  return {
    id: g.id,
    requirement: g.requirement,
    kind: g.kind,
    parts: g.parts,
    targets: g.targets,
    provider: g.provider,
    generation: g.generation,
    resource: g.resource,
    holders: g.holders,
    conditions: g.conditions,
    ...(verification ? { verification } : {}),
    ...(g.repairs?.length ? { repairs: g.repairs } : {}),
    ...(rotation ? { rotation } : {}),
    ...(lifecycle ? { lifecycle } : {}),
  };
}

/**
 * The report of processed modules (sorted by name), each with its grants (sorted by
 * requirement). `storedManifests` are names with a stored manifest; those without a module
 * record are listed as `unprocessed`. Pure.
 */
export function buildStatusReport(
  modules: readonly ModuleStatus[],
  grants: readonly Grant[],
  storedManifests: readonly string[] = [],
  verifications: ReadonlyMap<string, Verification> = new Map(),
  now = new Date(),
  rotations: ReadonlyMap<string, Rotation> = new Map(),
): StatusReport {
  const byModule = new Map<string, Grant[]>();
  for (const g of grants) byModule.set(g.module, [...(byModule.get(g.module) ?? []), g]);
  const processed = new Set(modules.map((m) => m.module));
  const report: StatusReport = {
    modules: [...modules]
      .sort((a, b) => a.module.localeCompare(b.module))
      .map((m) => ({
        module: m.module,
        state: m.state,
        message: m.message,
        since: m.since,
        processedAt: m.processedAt,
        grants: (byModule.get(m.module) ?? [])
          .slice()
          .sort((a, b) => a.requirement.localeCompare(b.requirement))
          .map((g) => toStatusGrant(g, verifications.get(g.id), now, rotations.get(g.id))),
      })),
  };
  const unprocessed = storedManifests.filter((n) => !processed.has(n)).sort();
  if (unprocessed.length) report.unprocessed = unprocessed;
  return report;
}

/** The message and hint for a module that has never been processed. */
export function notProcessedError(module: string, stored: { storedAt?: Date } | undefined, now = new Date()): NotProcessedError {
  const message = `no manifest of module ${module} has been processed`;
  if (stored) {
    const age = stored.storedAt ? ` ${formatAge(now.getTime() - stored.storedAt.getTime())} ago` : "";
    return {
      code: ErrorCodes.NotProcessed,
      module,
      message,
      manifestStored: true,
      hint:
        `a manifest of ${module} was stored${age}, but the resolver has not processed it yet; ` +
        `if this lasts, the resolver is not running: start the mesh with ${meshctlCommand()} up, or the resolver alone with ${serviceCommand("resolver")}`,
    };
  }
  return {
    code: ErrorCodes.NotProcessed,
    module,
    message,
    manifestStored: false,
    hint: `no manifest of ${module} is stored either; apply one with: ${meshctlCommand()} apply -f FILE`,
  };
}

/** Refuses a module name that cannot exist (exit 2) before it reaches a KV key. */
export function checkModuleName(module: string): void {
  if (!isValidName(module)) {
    throw new CliError(`${JSON.stringify(module)} is not a module name: a name ${NAME_RULE}`, ExitCodes.Usage);
  }
}

/** Names of every stored manifest. */
export async function storedManifestNames(store: Store): Promise<string[]> {
  const names: string[] = [];
  for await (const k of await store.kv.manifests.keys()) names.push(k);
  return names;
}

/** When the manifest of `module` was stored, or undefined when none is. */
export async function storedManifest(store: Store, module: string): Promise<{ storedAt: Date } | undefined> {
  const e = await store.kv.manifests.get(module);
  if (!e || e.operation !== "PUT" || e.length === 0) return undefined;
  return { storedAt: e.created };
}

/**
 * Reads the report from the store: every processed module, or only `module`. A module that
 * was never processed gives a report with no modules and an {@link NotProcessedError}.
 */
export async function loadStatus(store: Store, module?: string, now = new Date()): Promise<StatusReport> {
  if (module !== undefined) {
    checkModuleName(module);
    const status = await readJson(store.kv.modules, module, ModuleStatus);
    if (!status) return { modules: [], error: notProcessedError(module, await storedManifest(store, module), now) };
    const [grants, verifications, rotations] = await Promise.all([
      listJson(store.kv.grants, Grant, keys.grantsOf(module)),
      listJson(store.kv.verifications, Verification, keys.grantsOf(module)),
      listJson(store.kv.rotations, Rotation, keys.grantsOf(module)),
    ]);
    return buildStatusReport(
      [status.value],
      grants.map((g) => g.value),
      [],
      byGrant(verifications),
      now,
      rotationsByGrant(rotations),
    );
  }
  const [modules, grants, manifests, verifications, rotations] = await Promise.all([
    listJson(store.kv.modules, ModuleStatus),
    listJson(store.kv.grants, Grant),
    storedManifestNames(store),
    listJson(store.kv.verifications, Verification),
    listJson(store.kv.rotations, Rotation),
  ]);
  return buildStatusReport(
    modules.map((m) => m.value),
    grants.map((g) => g.value),
    manifests,
    byGrant(verifications),
    now,
    rotationsByGrant(rotations),
  );
}

/** Verification records by grant id. */
function byGrant(records: ReadonlyArray<{ value: Verification }>): Map<string, Verification> {
  return new Map(records.map((r) => [r.value.grant, r.value]));
}

/** Rotation records by grant id. */
function rotationsByGrant(records: ReadonlyArray<{ value: Rotation }>): Map<string, Rotation> {
  return new Map(records.map((r) => [r.value.grant, r.value]));
}
