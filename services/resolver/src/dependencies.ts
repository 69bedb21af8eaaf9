/**
 * Providers that need grants: a provider running as a module of the mesh (an artifact store
 * with its own database) can serve nothing until that module's requirements are provisioned.
 * Pure functions over what the resolver read; the order of provisioning falls out of them,
 * and a cycle is reported, naming its members, instead of waiting forever.
 */
import { isTrue, type Grant, type Kind, type ProviderDoc } from "@mesh/shared";

/** A grant that some provider needs, as stored: its kind and whether it is provisioned. */
export interface NeededGrant {
  kind: Kind;
  provisioned: boolean;
}
/** The grants named by providers' `needs`, by id; a grant not stored yet is absent. */
export type NeededGrants = ReadonlyMap<string, NeededGrant>;

/** Every grant id that some provider needs, sorted. */
export function neededGrantIds(providers: readonly ProviderDoc[]): string[] {
  return [...new Set(providers.flatMap((p) => p.needs ?? []))].sort();
}

/** The view of a stored grant that dependency checks use. */
export function neededGrant(g: Grant): NeededGrant {
  return { kind: g.kind, provisioned: isTrue(g.conditions, "Provisioned") };
}

/** The grants `provider` needs that are not provisioned, in the order it lists them. */
export function unmetNeeds(provider: ProviderDoc, needed: NeededGrants): string[] {
  return (provider.needs ?? []).filter((id) => !needed.get(id)?.provisioned);
}

/**
 * What a requirement of `kind` waits for: nothing when an installed provider of the kind has
 * every grant it needs, otherwise the unmet needs of all installed candidates.
 */
export function blockedBy(kind: Kind, installed: readonly ProviderDoc[], needed: NeededGrants): string[] {
  const candidates = installed.filter((p) => p.serves.includes(kind));
  const unmet = candidates.map((p) => unmetNeeds(p, needed));
  if (unmet.length === 0 || unmet.some((u) => u.length === 0)) return [];
  return [...new Set(unmet.flat())];
}

/**
 * A cycle of waiting that passes through grant `self` (of `kind`): the ids in order, from
 * `self` back to `self`, or undefined. A needed grant that is not stored yet waits for nothing
 * (it waits to be declared, which is not a cycle).
 */
export function dependencyCycle(self: string, kind: Kind, installed: readonly ProviderDoc[], needed: NeededGrants): string[] | undefined {
  const seen = new Set<string>();
  const walk = (id: string, k: Kind, path: string[]): string[] | undefined => {
    for (const next of blockedBy(k, installed, needed)) {
      if (next === self) return [...path, self];
      if (seen.has(next)) continue;
      seen.add(next);
      const g = needed.get(next);
      const found = g && walk(next, g.kind, [...path, next]);
      if (found) return found;
    }
    return undefined;
  };
  return walk(self, kind, [self]);
}
