/**
 * What the agent does with one Delivery, decided from plain data: the Delivery, the grant as
 * stored, and the generation already on disk. Pure, so every case is tested without NATS.
 */
import { holderKey, isTarget, type Delivery, type Grant } from "@mesh/shared";

/**
 * - `apply`: fetch the values, write the binding, record the holder (its receipt).
 * - `record`: the files already hold this generation (a crash came between writing and
 *   recording, or the grant lost the holder); record the holder only.
 * - `skip`: nothing to do (already delivered, or a newer generation supersedes it).
 * - `ignore`: the Delivery no longer applies (grant gone, part no longer a target); logged.
 */
export type DeliveryPlan = { action: "apply" } | { action: "record" } | { action: "skip"; reason: string } | { action: "ignore"; reason: string };

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
