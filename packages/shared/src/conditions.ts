/**
 * Conditions, Kubernetes/Crossplane style: a small closed set of types and reasons, each
 * condition set only when it changes (so `observedAt` says when the mesh last saw it move
 * or re-checked it).
 */
import { z } from "zod";

export const ConditionTypes = {
  Resolved: "Resolved",
  Provisioned: "Provisioned",
  Delivered: "Delivered",
  Verified: "Verified",
  Rotating: "Rotating",
} as const;
export type ConditionType = (typeof ConditionTypes)[keyof typeof ConditionTypes];

/** Every reason a condition can carry. Documented in docs/conditions.md. */
export const Reasons = {
  // Resolved
  ProviderSelected: "ProviderSelected",
  NoProvider: "NoProvider",
  ProviderNotInstalled: "ProviderNotInstalled",
  ProviderUnreachable: "ProviderUnreachable",
  /** Every installed provider of the kind needs grants that are not provisioned yet. */
  AwaitingDependency: "AwaitingDependency",
  /** The grants a provider needs lead back to the requirement itself: it can never be satisfied. */
  DependencyCycle: "DependencyCycle",
  // Provisioned
  Provisioned: "Provisioned",
  AwaitingResolution: "AwaitingResolution",
  NoInstalledPart: "NoInstalledPart",
  ProvisionFailed: "ProvisionFailed",
  // Delivered
  Delivered: "Delivered",
  AwaitingDelivery: "AwaitingDelivery",
  DeliveryFailed: "DeliveryFailed",
  // Verified (verifier)
  Verified: "Verified",
  ResourceMissing: "ResourceMissing",
  CredentialRejected: "CredentialRejected",
  CredentialDiverged: "CredentialDiverged",
  // Rotating (rotator)
  AwaitingHolders: "AwaitingHolders",
  HolderTimedOut: "HolderTimedOut",
  /** A holder's agent does not allow the hook its part's `onRotate` names: nothing ran; it waits (written by that agent). */
  HookNotAllowed: "HookNotAllowed",
  /** A holder's `onRotate` hook ran and failed, or could not start; the agent tries again (written by that agent). */
  HookFailed: "HookFailed",
  /** The grant moved to a preferred provider, and the handover cannot start there (retried). */
  HandoverBlocked: "HandoverBlocked",
} as const;
export type Reason = (typeof Reasons)[keyof typeof Reasons];

export const ConditionStatus = { True: "True", False: "False", Unknown: "Unknown" } as const;
export type ConditionStatus = (typeof ConditionStatus)[keyof typeof ConditionStatus];

export const Condition = z.object({
  type: z.enum(Object.values(ConditionTypes) as [ConditionType, ...ConditionType[]]),
  status: z.enum(["True", "False", "Unknown"]),
  reason: z.enum(Object.values(Reasons) as [Reason, ...Reason[]]),
  message: z.string(),
  /** ISO time the condition was last set or re-confirmed. */
  observedAt: z.string(),
});
export type Condition = z.infer<typeof Condition>;

/** The condition of a type, if any. */
export function getCondition(conditions: readonly Condition[], type: ConditionType): Condition | undefined {
  return conditions.find((c) => c.type === type);
}

/** True when the condition of `type` exists with status True. */
export function isTrue(conditions: readonly Condition[], type: ConditionType): boolean {
  return getCondition(conditions, type)?.status === "True";
}

/**
 * Returns the conditions with `next` set. When a condition of that type already says the same
 * (status, reason, message), the list is returned unchanged, the same array, so callers can
 * skip the write.
 */
export function setCondition(conditions: readonly Condition[], next: Omit<Condition, "observedAt">, now: Date = new Date()): Condition[] {
  const cur = getCondition(conditions, next.type);
  if (cur && cur.status === next.status && cur.reason === next.reason && cur.message === next.message) {
    return conditions as Condition[];
  }
  const c: Condition = { ...next, observedAt: now.toISOString() };
  const order = Object.values(ConditionTypes);
  return [...conditions.filter((x) => x.type !== next.type), c].sort((a, b) => order.indexOf(a.type) - order.indexOf(b.type));
}
