/**
 * Resolution rules: which provider satisfies a requirement, and the grant that records the
 * decision. Pure functions over plain data; the resolver service only reads and writes them.
 */
import {
  BOOTSTRAP_PROVIDER,
  BUILTIN_SECRET_PROVIDER,
  CONTROL_PLANE_MODULE,
  servesModule,
  Kinds,
  grantId,
  partIdentityRequirements,
  setCondition,
  withDeliveredCondition,
  type Condition,
  type DeletionPolicy,
  type Grant,
  type GrantTarget,
  type Kind,
  type ModuleDoc,
  type ProviderDoc,
  type ReachabilityRecord,
  type RequirementDoc,
  type RepairPolicy,
  type RequirementOptions,
  type VerifyPolicy,
} from "@mesh/shared";
import { unreachableFrom } from "./reachability.js";
import { dependencyCycle, unmetNeeds, type NeededGrants } from "./dependencies.js";

/** The built-in provider of `secret`: always registered, always installed, on every node. */
export const builtinSecretProvider: ProviderDoc = {
  kind: "Provider",
  name: BUILTIN_SECRET_PROVIDER,
  serves: [Kinds.Secret],
  node: "builtin",
  endpoint: "builtin://secret",
  installed: true,
};

/** The resolver's decision for one requirement. */
export interface Resolution {
  module: string;
  requirement: string;
  kind: Kind;
  parts: string[];
  targets: GrantTarget[];
  provider: string | null;
  resolved: Omit<Condition, "observedAt">;
  /** The requirement's `verify:` policy, copied onto the grant for the verifier. */
  verify?: VerifyPolicy;
  /** The requirement's `repair:` policy, copied onto the grant for the verifier. */
  repair?: RepairPolicy;
  /** The requirement's kind-specific options, copied onto the grant for the adapter. */
  options?: RequirementOptions;
  /** The requirement's `env:`, copied onto the grant for the agents and the SDK. */
  env?: Record<string, string>;
  /** The requirement's `deletionPolicy:`, copied onto the grant for when nothing needs it any more. */
  deletionPolicy?: DeletionPolicy;
}

/** Every provider that can serve `kind`, built-ins included, sorted by name. */
export function candidatesFor(kind: Kind, providers: readonly ProviderDoc[]): ProviderDoc[] {
  const all = kind === Kinds.Secret ? [...providers, builtinSecretProvider] : [...providers];
  return all.filter((p) => p.serves.includes(kind)).sort((a, b) => a.name.localeCompare(b.name));
}

/**
 * Chooses a provider for one requirement.
 *
 * - The provider already chosen (`current`) is kept while it is registered, installed and
 *   serves the kind: a grant does not move because another provider appears, unless that one
 *   has a higher `preference` (a handover, carried out by the rotator like a rotation).
 * - Otherwise the installed candidate with the highest preference wins, then the one on the
 *   node of the first target, then by name: deterministic, so every resolver instance agrees.
 * - No candidate: `NoProvider`; candidates but none installed: `ProviderNotInstalled`, naming them.
 * - A provider whose `needs` are not all provisioned is not chosen (`needed`: the stored state
 *   of those grants). With none left: `AwaitingDependency` naming what is missing, or
 *   `DependencyCycle` naming the members when the wait leads back to this grant (`self`).
 * - Agents' `reachability` reports: a new choice prefers a provider that no target's node
 *   reports unreachable. When the provider kept or chosen cannot be reached from a target's
 *   node, the result is `ProviderUnreachable` naming the nodes, and `provider` still names it
 *   (a grant never moves because of a network fault, which would mean a new, empty resource);
 *   the requirement moves on by itself when the agent reports the provider reachable again.
 */
export function chooseProvider(
  kind: Kind,
  targets: readonly GrantTarget[],
  providers: readonly ProviderDoc[],
  current: string | null | undefined,
  reachability: readonly ReachabilityRecord[] = [],
  dependencies: { self: string; needed: NeededGrants } = { self: "", needed: new Map() },
): Pick<Resolution, "provider" | "resolved"> {
  const candidates = candidatesFor(kind, providers);
  if (candidates.length === 0) {
    return {
      provider: null,
      resolved: {
        type: "Resolved",
        status: "False",
        reason: "NoProvider",
        message: `no provider serves ${kind}; apply a Provider document with serves: [${kind}]`,
      },
    };
  }
  const installed = candidates.filter((p) => p.installed);
  if (installed.length === 0) {
    const names = candidates.map((p) => `${p.name} (node ${p.node})`).join(", ");
    return {
      provider: null,
      resolved: {
        type: "Resolved",
        status: "False",
        reason: "ProviderNotInstalled",
        message: `${kind} is served by ${names}, but ${candidates.length > 1 ? "none is" : "it is not"} installed; install it and apply its document with installed: true`,
      },
    };
  }
  const { self, needed } = dependencies;
  const kept = installed.find((p) => p.name === current);
  const usable = installed.filter((p) => unmetNeeds(p, needed).length === 0);
  if (!kept && usable.length === 0) {
    const everyInstalled = [...providers, builtinSecretProvider].filter((p) => p.installed);
    return waitingForDependencies(kind, self, installed, everyInstalled, needed);
  }
  const preference = (p: ProviderDoc) => p.preference ?? 0;
  const pick = (among: ProviderDoc[]) => {
    const top = Math.max(...among.map(preference));
    const best = among.filter((p) => preference(p) === top);
    return best.find((p) => targets.length > 0 && p.node === targets[0]!.node) ?? best[0];
  };
  const preferred = pick(usable.filter((p) => unreachableFrom(p.name, targets, reachability).length === 0));
  const chosen = kept ? (preferred && preference(preferred) > preference(kept) ? preferred : kept) : (preferred ?? pick(usable)!);
  const blocked = unreachableFrom(chosen.name, targets, reachability);
  if (blocked.length > 0) {
    const nodes = blocked.map((r) => `node ${r.node}`).join(", ");
    return {
      provider: chosen.name,
      resolved: {
        type: "Resolved",
        status: "False",
        reason: "ProviderUnreachable",
        message: `provider ${chosen.name} (node ${chosen.node}) cannot be reached from ${nodes}, where parts that need it run: ${blocked.map((r) => r.message).join("; ")}; make ${blocked[0]!.address} reachable from there (routes, firewall, the address in the provider's endpoint)`,
      },
    };
  }
  const where = chosen.name === BUILTIN_SECRET_PROVIDER ? "built in" : `node ${chosen.node}`;
  return {
    provider: chosen.name,
    resolved: { type: "Resolved", status: "True", reason: "ProviderSelected", message: `provider ${chosen.name} (${where})` },
  };
}

/**
 * What a module requires: what it declares, and, once some provider serves `mesh.identity`
 * (the mesh's bus), an identity for each of its parts.
 */
export function requirementsOf(manifest: ModuleDoc, providers: readonly ProviderDoc[]): RequirementDoc[] {
  const identities = providers.some((p) => p.serves.includes(Kinds.MeshIdentity)) ? partIdentityRequirements(manifest) : [];
  return [...manifest.requires, ...identities];
}

/** The resolution of every requirement of a module. `current` maps requirement → chosen provider so far. */
export function resolveModule(
  manifest: ModuleDoc,
  providers: readonly ProviderDoc[],
  current: ReadonlyMap<string, string | null> = new Map(),
  reachability: readonly ReachabilityRecord[] = [],
  needed: NeededGrants = new Map(),
): Resolution[] {
  const partByName = new Map(manifest.parts.map((p) => [p.name, p]));
  return requirementsOf(manifest, providers).map((req) => {
    const parts = req.parts ?? manifest.parts.map((p) => p.name);
    const targets = parts
      .map((name) => partByName.get(name))
      .filter((p): p is NonNullable<typeof p> => p !== undefined && p.installed)
      .map((p) => ({ part: p.name, node: p.node }));
    return {
      module: manifest.name,
      requirement: req.name,
      kind: req.kind,
      parts,
      targets,
      ...withBootstrapNote(
        chooseProvider(
          req.kind,
          targets,
          providers.filter((p) => servesModule(p, req.kind, manifest.name)),
          current.get(req.name),
          reachability,
          { self: grantId(manifest.name, req.name), needed },
        ),
        req.kind,
        manifest.name,
        providers,
      ),
      ...(req.verify ? { verify: req.verify } : {}),
      ...(req.repair ? { repair: req.repair } : {}),
      ...(req.options ? { options: req.options } : {}),
      ...(req.env && Object.keys(req.env).length ? { env: req.env } : {}),
      ...(req.deletionPolicy ? { deletionPolicy: req.deletionPolicy } : {}),
    };
  });
}

/**
 * A `NoProvider` of a registry kind, where the bootstrap provider serves that kind to the
 * control plane alone: the message says so, so nobody looks for a typo.
 */
function withBootstrapNote(
  r: Pick<Resolution, "provider" | "resolved">,
  kind: Kind,
  module: string,
  providers: readonly ProviderDoc[],
): Pick<Resolution, "provider" | "resolved"> {
  if (r.resolved.reason !== "NoProvider" || !providers.some((p) => p.serves.includes(kind) && !servesModule(p, kind, module))) return r;
  return {
    ...r,
    resolved: {
      ...r.resolved,
      message: `${r.resolved.message} (provider ${BOOTSTRAP_PROVIDER} serves ${kind} to module ${CONTROL_PLANE_MODULE} only, from the mesh's own NATS: register a registry server as a provider of ${kind})`,
    },
  };
}

/** `AwaitingDependency` or `DependencyCycle`, for a requirement whose every installed provider needs something unprovisioned. */
function waitingForDependencies(
  kind: Kind,
  self: string,
  installed: readonly ProviderDoc[],
  everyInstalled: readonly ProviderDoc[],
  needed: NeededGrants,
): Pick<Resolution, "provider" | "resolved"> {
  const cycle = self ? dependencyCycle(self, kind, everyInstalled, needed) : undefined;
  if (cycle) {
    return {
      provider: null,
      resolved: {
        type: "Resolved",
        status: "False",
        reason: "DependencyCycle",
        message: `${self} can never be provisioned: it waits for itself through ${cycle.join(" → ")}; give one of them a provider that needs none of the others`,
      },
    };
  }
  const waits = installed.map((p) => `${p.name} needs ${unmetNeeds(p, needed).join(", ")}`).join("; ");
  return {
    provider: null,
    resolved: {
      type: "Resolved",
      status: "False",
      reason: "AwaitingDependency",
      message: `waiting: ${waits}, not provisioned yet; it moves on by itself once they are`,
    },
  };
}

function sameJson(a: unknown, b: unknown): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

/**
 * The grant after applying a resolution to what is stored (`current`, undefined when new).
 * Returns undefined when nothing changes, so the caller writes nothing. Fields owned by other
 * services (generation, resource, holders, `revoked`, their conditions) are kept; a grant being
 * removed, or retained, that is declared again is neither any more (the provisioner then gives
 * it a fresh generation on what was kept).
 */
export function applyResolution(current: Grant | undefined, r: Resolution, now = new Date()): Grant | undefined {
  const base: Grant = current ?? {
    id: grantId(r.module, r.requirement),
    module: r.module,
    requirement: r.requirement,
    kind: r.kind,
    parts: [],
    targets: [],
    provider: null,
    generation: 0,
    resource: {},
    holders: {},
    conditions: [],
    createdAt: now.toISOString(),
  };
  const next: Grant = {
    ...base,
    kind: r.kind,
    parts: r.parts,
    targets: r.targets,
    provider: r.provider,
    conditions: setCondition(base.conditions, r.resolved, now),
    // The verifier's policies as the manifest says now; one left out is removed (undefined is
    // not stored). Spread over `base`, so a field keeps its place and an unchanged grant
    // compares equal below.
    verify: r.verify,
    repair: r.repair,
    options: r.options,
    env: r.env,
    deletionPolicy: r.deletionPolicy,
    // Declared again: no longer being removed, and what was retained is adopted.
    removal: undefined,
    retained: undefined,
  };
  // Holders that are no longer targets stop counting for delivery.
  next.conditions = withDeliveredCondition(next, now);
  if (current && sameJson(current, next)) return undefined;
  return next;
}
