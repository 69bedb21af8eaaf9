/**
 * What the agent does with one Delivery, decided from plain data: the Delivery, the grant as
 * stored, and the generation already on disk. Pure, so every case is tested without NATS.
 */
import { envDigest, holderKey, isTarget, type Delivery, type Grant } from "@mesh/shared";

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
 * So is one older than the binding when the binding holds the generation a rotation is
 * taking the grant to (the grant's next): the rotation's broadcast wrote it, the grant moves
 * to it at the commit, and the commit retires what the older Delivery carries. (A Delivery of
 * a generation the grant is still on, that came back after a retry, lands there.) A binding
 * further ahead than that is a former grant's of the same name, removed and made again while
 * this node's agent was away: the new grant's Delivery is applied over it.
 */
export function planDelivery(delivery: Delivery, grant: Grant | undefined, localGeneration: number | undefined): DeliveryPlan {
  if (!grant) return { action: "ignore", reason: `grant ${delivery.grant} no longer exists` };
  if (!isTarget(grant, delivery.node, delivery.part)) {
    return { action: "ignore", reason: `part ${delivery.part} on node ${delivery.node} is no longer a target of grant ${delivery.grant}` };
  }
  if (delivery.generation < grant.generation) {
    return { action: "skip", reason: `generation ${delivery.generation} is superseded by generation ${grant.generation}` };
  }
  if (localGeneration !== undefined && delivery.generation < localGeneration && localGeneration <= grant.generation + 1) {
    return { action: "skip", reason: `the binding holds generation ${localGeneration} already, a rotation's, newer than ${delivery.generation}` };
  }
  const held = grant.holders[holderKey(delivery.node, delivery.part)]?.generation ?? 0;
  if (localGeneration === delivery.generation) {
    // Held, but its env file written for another `env` mapping: written again with the grant's, and recorded.
    const envAsHeld = (grant.holders[holderKey(delivery.node, delivery.part)]?.env ?? "") === envDigest(grant.env);
    return held >= delivery.generation && envAsHeld ? { action: "skip", reason: "already delivered" } : { action: "record" };
  }
  return { action: "apply" };
}
