/**
 * Whether and how to repair a failed check, and the grant's bounded repair history. Pure.
 */
import { Kinds, REPAIR_HISTORY_LIMIT, type CheckFailureReason, type Kind, type RepairEvent, type RepairPolicy } from "@mesh/shared";

/** What a repair does: re-create the resource, or re-apply the credential through the admin connection. */
export type RepairAction = RepairEvent["action"];

/**
 * The repair for a failed check, or undefined when none applies:
 * - `ProviderUnreachable` is not the verifier's to repair (nothing to talk to);
 * - under `repair: report` nothing is touched unless an operator asked (`requested`);
 * - during a rotation the rotator owns the credentials, so nothing is touched;
 * - a `secret` is repaired only when it is a provider's admin password and its server holds an
 *   older generation (`CredentialDiverged`): its current one is set there;
 * - `ResourceMissing` → `recreate`; `CredentialRejected` / `CredentialDiverged` → `reapply`.
 */
export function repairAction(
  reason: CheckFailureReason,
  opts: { policy: RepairPolicy; requested?: boolean; rotating?: boolean; kind?: Kind },
): RepairAction | undefined {
  if (reason === "ProviderUnreachable") return undefined;
  // A secret fails only as a provider's admin password; what the mesh can repair there is a server on an older generation.
  if (opts.kind === Kinds.Secret && reason !== "CredentialDiverged") return undefined;
  if (opts.rotating) return undefined;
  if (opts.policy === "report" && !opts.requested) return undefined;
  return reason === "ResourceMissing" ? "recreate" : "reapply";
}

/** `history` with `event` appended, keeping the newest `limit`. */
export function appendRepair(history: readonly RepairEvent[] | undefined, event: RepairEvent, limit = REPAIR_HISTORY_LIMIT): RepairEvent[] {
  return [...(history ?? []), event].slice(-limit);
}

/** One line for the log and the history: what was found and what was done. */
export function describeRepair(action: RepairAction, reason: CheckFailureReason, generation: number, found: string, done?: string): string {
  const did =
    done ??
    (action === "recreate"
      ? `re-created the resource with generation ${generation}'s credential`
      : `re-applied generation ${generation}'s credential through the provider's admin connection`);
  return `${reason}: ${found} — ${did}`;
}
