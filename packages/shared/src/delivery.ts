/**
 * The `Delivered` condition of a grant, from what its holders have confirmed receiving. Pure.
 */
import { setCondition, type Condition } from "./conditions.js";
import { holderKey, type Grant } from "./schemas/grant.js";

/** True when `part` on `node` is one of the grant's delivery targets. */
export function isTarget(grant: Grant, node: string, part: string): boolean {
  return grant.targets.some((t) => t.node === node && t.part === part);
}

/**
 * The message id of the Delivery of `g`'s current generation to `node/part`, which makes a
 * repeat within the stream's duplicate window free. The grant's incarnation (`createdAt`) and
 * the holder's last withdrawal are in it, so a new delivery of the same generation number (a
 * grant deleted and declared again, a part uninstalled and installed again) is no repeat.
 */
export function deliveryMsgId(g: Grant, node: string, part: string): string {
  const withdrawn = g.withdrawn?.[holderKey(node, part)];
  return `${g.id}@${g.createdAt ?? ""}:g${g.generation}:${node}:${part}${withdrawn ? `:after-${withdrawn}` : ""}`;
}

/** Targets that do not yet hold the grant's current generation. */
export function undelivered(grant: Grant): Grant["targets"] {
  return grant.targets.filter((t) => (grant.holders[holderKey(t.node, t.part)]?.generation ?? 0) < grant.generation);
}

/** The grant's conditions with `Delivered` computed from its targets and holders. */
export function withDeliveredCondition(grant: Grant, now = new Date()): Condition[] {
  if (grant.generation === 0 || grant.targets.length === 0) {
    return grant.conditions.some((c) => c.type === "Delivered") ? grant.conditions.filter((c) => c.type !== "Delivered") : grant.conditions;
  }
  const missing = undelivered(grant);
  if (missing.length === 0) {
    return setCondition(
      grant.conditions,
      {
        type: "Delivered",
        status: "True",
        reason: "Delivered",
        message: `generation ${grant.generation} delivered to ${grant.targets.map((t) => `${t.part}@${t.node}`).join(", ")}`,
      },
      now,
    );
  }
  return setCondition(
    grant.conditions,
    {
      type: "Delivered",
      status: "False",
      reason: "AwaitingDelivery",
      message: `waiting for the agent of ${missing.map((t) => `node ${t.node} (part ${t.part})`).join(", ")} to write generation ${grant.generation}`,
    },
    now,
  );
}
