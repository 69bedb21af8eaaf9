/**
 * What the agent does with one Delivery, decided from plain data: the Delivery, the grant as
 * stored, and the generation already on disk. Pure, so every case is tested without NATS.
 */
import { holderKey, setCondition, withDeliveredCondition, type Delivery, type Grant } from "@mesh/shared";

/**
 * - `apply`: fetch the values, write the binding, record the holder.
 * - `record`: the files already hold this generation (a crash came between writing and
 *   recording); record the holder only.
 * - `skip`: nothing to do (already delivered, or a newer generation supersedes it).
 * - `ignore`: the Delivery no longer applies (grant gone, part no longer a target); logged.
 */
export type DeliveryPlan =
  | { action: "apply" }
  | { action: "record" }
  | { action: "skip"; reason: string }
  | { action: "ignore"; reason: string };

/** True when `part` on `node` is one of the grant's delivery targets. */
export function isTarget(grant: Grant, node: string, part: string): boolean {
  return grant.targets.some((t) => t.node === node && t.part === part);
}

/**
 * Decides what to do with `delivery`, given the grant as stored now (undefined when it no
 * longer exists) and the generation of the binding on disk (undefined when there is none).
 * A Delivery older than the grant's current generation is skipped: a Delivery of the
 * current one exists too, so applying the old one could only move the holder backwards.
 */
export function planDelivery(delivery: Delivery, grant: Grant | undefined, localGeneration: number | undefined): DeliveryPlan {
  if (!grant) return { action: "ignore", reason: `grant ${delivery.grant} no longer exists` };
  if (!isTarget(grant, delivery.node, delivery.part)) {
    return { action: "ignore", reason: `part ${delivery.part} on node ${delivery.node} is no longer a target of grant ${delivery.grant}` };
  }
  if (delivery.generation < grant.generation) {
    return { action: "skip", reason: `generation ${delivery.generation} is superseded by generation ${grant.generation}` };
  }
  const held = grant.holders[holderKey(delivery.node, delivery.part)]?.generation ?? 0;
  if (localGeneration === delivery.generation) {
    return held >= delivery.generation ? { action: "skip", reason: "already delivered" } : { action: "record" };
  }
  return { action: "apply" };
}

/**
 * The grant with `node/part` recorded as holding `generation` and `Delivered` recomputed, or
 * undefined when there is nothing to write: the grant is gone, the part is no longer a
 * target, or the holder already has this generation or a newer one. Pure; for `mutateJson`.
 */
export function recordHolder(grant: Grant | undefined, node: string, part: string, generation: number, now: Date): Grant | undefined {
  if (!grant || !isTarget(grant, node, part)) return undefined;
  const key = holderKey(node, part);
  if ((grant.holders[key]?.generation ?? 0) >= generation) return undefined;
  const updated: Grant = { ...grant, holders: { ...grant.holders, [key]: { generation, deliveredAt: now.toISOString() } } };
  return { ...updated, conditions: withDeliveredCondition(updated, now) };
}

/**
 * The grant with `Delivered` set to False/`DeliveryFailed` naming the holder and why, so a
 * delivery that cannot succeed is visible in `meshctl status` and not only in a log. Undefined
 * when there is nothing to write (grant gone, part no longer a target, generation superseded,
 * or the same failure already recorded).
 * `message` must carry no secret value.
 */
export function recordDeliveryFailure(grant: Grant | undefined, node: string, part: string, generation: number, message: string, now: Date): Grant | undefined {
  // A failure about a part that is no longer a target, or a generation already superseded, says nothing about the grant now.
  if (!grant || !isTarget(grant, node, part) || generation < grant.generation) return undefined;
  const conditions = setCondition(
    grant.conditions,
    {
      type: "Delivered",
      status: "False",
      reason: "DeliveryFailed",
      message: `the agent of node ${node} could not deliver generation ${generation} to part ${part}: ${message}`,
    },
    now,
  );
  return conditions === grant.conditions ? undefined : { ...grant, conditions };
}
