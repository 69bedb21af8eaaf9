/**
 * How a module's state follows from its grants. Pure; the resolver calls it on every change.
 */
import { getCondition, isTrue } from "./conditions.js";
import { ModuleStates, type Grant, type ModuleState } from "./schemas/grant.js";

/** Resolution failures that mean "cannot be satisfied as the world is now". */
const UNSATISFIABLE = new Set(["NoProvider", "ProviderNotInstalled", "ProviderUnreachable", "DependencyCycle"]);
/** Failures of a grant that had been, or could be, working. */
const DEGRADED = new Set([
  "ProvisionFailed",
  "DeliveryFailed",
  "ResourceMissing",
  "CredentialRejected",
  "CredentialDiverged",
  "ProviderUnreachable",
  "HandoverBlocked",
]);

export interface DerivedState {
  state: ModuleState;
  message: string;
}

/**
 * The state of a module with `requirements` requirements (declared, and its parts' identities,
 * `identities` of them) and these grants.
 *
 * - no requirement declared: `NothingRequired` (a positive state, not "never ran"), once its
 *   parts' identities are delivered; a failing identity shows as below;
 * - a requirement that cannot be resolved: `Unsatisfiable`;
 * - a grant whose provisioning, delivery or verification failed: `Degraded`;
 * - every grant with an installed part provisioned and delivered (and not failing
 *   verification): `Ready`; grants none of whose parts is installed do not count;
 * - otherwise `Pending`.
 */
export function deriveModuleState(requirements: number, grants: readonly Grant[], identities = 0): DerivedState {
  const nothing: DerivedState = {
    state: ModuleStates.NothingRequired,
    message: identities ? `the module declares no requirement (its parts' identities are delivered)` : "the module declares no requirement",
  };
  if (requirements === 0) return nothing;
  const derived = derive(requirements, grants);
  return requirements === identities && derived.state === ModuleStates.Ready ? nothing : derived;
}

function derive(requirements: number, grants: readonly Grant[]): DerivedState {
  const unsat = grants.filter((g) => {
    const r = getCondition(g.conditions, "Resolved");
    return r?.status === "False" && UNSATISFIABLE.has(r.reason);
  });
  if (unsat.length) {
    return {
      state: ModuleStates.Unsatisfiable,
      message: unsat.map((g) => `${g.requirement}: ${getCondition(g.conditions, "Resolved")!.reason}`).join("; "),
    };
  }
  const failing = grants.filter((g) => g.conditions.some((c) => c.status === "False" && DEGRADED.has(c.reason)));
  if (failing.length) {
    return {
      state: ModuleStates.Degraded,
      message: failing.map((g) => `${g.requirement}: ${g.conditions.find((c) => c.status === "False" && DEGRADED.has(c.reason))!.reason}`).join("; "),
    };
  }
  const active = grants.filter((g) => g.targets.length > 0);
  const waiting = active.filter((g) => !(isTrue(g.conditions, "Provisioned") && isTrue(g.conditions, "Delivered")));
  if (grants.length < requirements) return { state: ModuleStates.Pending, message: "requirements not yet resolved" };
  if (waiting.length) {
    const why = (g: Grant) => {
      const r = getCondition(g.conditions, "Resolved");
      return r?.status === "False" ? `${g.requirement} (${r.reason})` : g.requirement;
    };
    return { state: ModuleStates.Pending, message: `waiting for ${waiting.map(why).join(", ")}` };
  }
  const dormant = grants.length - active.length;
  return {
    state: ModuleStates.Ready,
    message: dormant ? `all requirements of installed parts are satisfied (${dormant} wait for a part to be installed)` : "all requirements are satisfied",
  };
}
