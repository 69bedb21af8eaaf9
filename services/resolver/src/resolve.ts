/**
 * Resolution rules: which provider satisfies a requirement, and the grant that records the
 * decision. Pure functions over plain data; the resolver service only reads and writes them.
 */
import {
  BUILTIN_SECRET_PROVIDER,
  Kinds,
  grantId,
  setCondition,
  withDeliveredCondition,
  type Condition,
  type Grant,
  type GrantTarget,
  type Kind,
  type ModuleDoc,
  type ProviderDoc,
} from "@mesh/shared";

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
 *   serves the kind: a grant does not move because another provider appears.
 * - Otherwise the installed candidate on the node of the first target wins, then any
 *   installed candidate, by name: deterministic, so every resolver instance agrees.
 * - No candidate: `NoProvider`; candidates but none installed: `ProviderNotInstalled`, naming them.
 */
export function chooseProvider(
  kind: Kind,
  targets: readonly GrantTarget[],
  providers: readonly ProviderDoc[],
  current: string | null | undefined,
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
  const chosen =
    installed.find((p) => p.name === current) ??
    installed.find((p) => targets.length > 0 && p.node === targets[0]!.node) ??
    installed[0]!;
  const where = chosen.name === BUILTIN_SECRET_PROVIDER ? "built in" : `node ${chosen.node}`;
  return {
    provider: chosen.name,
    resolved: { type: "Resolved", status: "True", reason: "ProviderSelected", message: `provider ${chosen.name} (${where})` },
  };
}

/** The resolution of every requirement of a module. `current` maps requirement → chosen provider so far. */
export function resolveModule(
  manifest: ModuleDoc,
  providers: readonly ProviderDoc[],
  current: ReadonlyMap<string, string | null> = new Map(),
): Resolution[] {
  const partByName = new Map(manifest.parts.map((p) => [p.name, p]));
  return manifest.requires.map((req) => {
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
      ...chooseProvider(req.kind, targets, providers, current.get(req.name)),
    };
  });
}

function sameJson(a: unknown, b: unknown): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

/**
 * The grant after applying a resolution to what is stored (`current`, undefined when new).
 * Returns undefined when nothing changes, so the caller writes nothing. Fields owned by other
 * services (generation, resource, holders, their conditions) are kept.
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
  };
  const next: Grant = {
    ...base,
    kind: r.kind,
    parts: r.parts,
    targets: r.targets,
    provider: r.provider,
    conditions: setCondition(base.conditions, r.resolved, now),
  };
  // Holders that are no longer targets stop counting for delivery.
  next.conditions = withDeliveredCondition(next, now);
  if (current && sameJson(current, next)) return undefined;
  return next;
}
