/**
 * Taking a grant back once no installed part needs it: the same reconciliation whether the
 * requirement was removed from its module, the module was deleted, or every part that needed
 * it was uninstalled. The steps, each recorded on the grant so that any instance of any
 * service can pick them up after a crash:
 *
 * 1. the provider stops accepting every generation (`revoked`: logins dropped or locked,
 *    identities revoked; the resource itself dropped unless its data is kept), and the
 *    store's values of them are purged;
 * 2. every holder that is no longer a target has its binding removed by its node's agent
 *    (a withdrawal Delivery; its receipt says when), and leaves the grant's holders;
 * 3. a removed grant is then deleted, or kept as `retained` when its data was.
 *
 * Pure: what is due and what remains, from the grant alone.
 */
import { SELF_EXPIRING_KINDS, deletionPolicyOf } from "./kinds.js";
import { holderKey, ModuleStates, type Grant } from "./schemas/grant.js";
import { withDeliveredCondition } from "./delivery.js";
import type { DerivedState } from "./module-state.js";

/**
 * Until when what `g` last issued keeps working after it is revoked or taken back, for a kind
 * whose generations cannot be disabled before they expire (`SELF_EXPIRING_KINDS`): its
 * `resource.expires`; undefined for every other kind, whose revocation takes effect at once.
 */
export function validAfterRevocation(g: Pick<Grant, "kind" | "resource">): string | undefined {
  return SELF_EXPIRING_KINDS.includes(g.kind) ? g.resource.expires : undefined;
}

/** The grant marked to be taken back because `reason`: no targets any more, and the time it was asked. */
export function withRemoval(g: Grant, reason: string, now = new Date()): Grant {
  const next: Grant = { ...g, targets: [], removal: { requestedAt: now.toISOString(), reason } };
  return { ...next, conditions: withDeliveredCondition(next, now) };
}

/** True when no installed part needs the grant: removed, or every part that needs it uninstalled. */
export function isUnneeded(g: Grant): boolean {
  return g.removal !== undefined || g.targets.length === 0;
}

/** True when the grant's generations must be revoked at the provider now: unneeded, and some generation is not revoked yet. */
export function revocationDue(g: Grant): boolean {
  return isUnneeded(g) && g.generation > 0 && !isRevoked(g);
}

/** True when every generation of the grant has been revoked at the provider (not only set out to be). */
export function isRevoked(g: Grant): boolean {
  return g.revoked !== undefined && g.revoked.done !== false && g.revoked.generation >= g.generation;
}

/** Whether taking the grant back drops its resource: its policy (or its kind's default) says `Delete`. */
export function dropsResource(g: Grant): boolean {
  return deletionPolicyOf(g.kind, g.deletionPolicy) === "Delete";
}

/** Holders (`<node>/<part>`) that hold something of the grant but are no longer its targets: their bindings are to be removed. */
export function pendingWithdrawals(g: Grant): string[] {
  const targets = new Set(g.targets.map((t) => holderKey(t.node, t.part)));
  return Object.keys(g.holders)
    .filter((h) => !targets.has(h))
    .sort();
}

/** True when a removed grant has been taken back entirely: nothing left to revoke, no binding left on a node. */
export function removalDone(g: Grant): boolean {
  return g.removal !== undefined && !revocationDue(g) && pendingWithdrawals(g).length === 0;
}

/** What is left of taking the grant back, in words (empty when nothing is). */
export function removalRemains(g: Grant): string[] {
  const left: string[] = [];
  if (revocationDue(g)) left.push(`revoking generation${g.generation > 1 ? "s 1-" : " "}${g.generation} at ${g.provider ?? "its provider"}`);
  for (const h of pendingWithdrawals(g)) {
    const [node, part] = h.split("/");
    left.push(`removing part ${part}'s binding from node ${node} (its agent does it when it runs)`);
  }
  return left;
}

/** How to drop what a retained grant kept. */
export function dropRetainedHint(g: Grant): string {
  return `meshctl delete retained ${g.id}`;
}

/**
 * The state of a deleted module with these grants left: `Deleting` while some are being taken
 * back, `Deleted` when only retained data is left (listed), undefined when nothing is (the
 * module then has no state at all, as if it had never been).
 */
export function deletedModuleState(grants: readonly Grant[]): DerivedState | undefined {
  const going = grants.filter((g) => !g.retained);
  if (going.length) {
    const what = going.map((g) => {
      const left = removalRemains(g);
      return `${g.requirement} (${left.length ? left.join("; ") : "finishing"})`;
    });
    return { state: ModuleStates.Deleting, message: `taking back ${what.join(", ")}` };
  }
  if (grants.length === 0) return undefined;
  const kept = grants.map(
    (g) => `${g.requirement}: the data of ${g.kind} on ${g.provider ?? "its provider"}, since ${g.retained!.since} (${dropRetainedHint(g)} drops it)`,
  );
  return { state: ModuleStates.Deleted, message: `deleted; retained ${kept.join("; ")}` };
}
