/**
 * The `Delivered` condition of a grant, from what its holders have confirmed receiving. Pure.
 */
import { envDigest } from "./binding-env.js";
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
 * grant deleted and declared again, a part uninstalled and installed again) is no repeat; so is
 * its `env` (a changed mapping is delivered again at the same generation).
 */
export function deliveryMsgId(g: Grant, node: string, part: string): string {
  const withdrawn = g.withdrawn?.[holderKey(node, part)];
  const env = envDigest(g.env);
  return `${g.id}@${g.createdAt ?? ""}:g${g.generation}:${node}:${part}${withdrawn ? `:after-${withdrawn}` : ""}${env ? `:env-${env}` : ""}`;
}

/**
 * Targets that do not yet hold the grant's current generation, or hold it with an env file
 * written for another `env` mapping than the grant's.
 */
export function undelivered(grant: Grant): Grant["targets"] {
  const env = envDigest(grant.env);
  return grant.targets.filter((t) => {
    const held = grant.holders[holderKey(t.node, t.part)];
    return (held?.generation ?? 0) < grant.generation || (held?.env ?? "") !== env;
  });
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
        message: `generation ${grant.generation} delivered to ${grant.targets.map((t) => `${t.part}@${t.node}`).join(", ")}${restoredNote(grant)}`,
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
      message: awaitingMessage(grant, missing),
    },
    now,
  );
}

/** What `Delivered` False waits for: each agent to write the generation, or (holding it) the env file of a changed `env`. */
function awaitingMessage(grant: Grant, missing: Grant["targets"]): string {
  const who = (ts: Grant["targets"]) => ts.map((t) => `node ${t.node} (part ${t.part})`).join(", ");
  const generation = missing.filter((t) => (grant.holders[holderKey(t.node, t.part)]?.generation ?? 0) < grant.generation);
  const env = missing.filter((t) => !generation.includes(t));
  const parts = [
    ...(generation.length ? [`the agent of ${who(generation)} to write generation ${grant.generation}`] : []),
    ...(env.length ? [`the agent of ${who(env)} to write the env file for the requirement's changed env`] : []),
  ];
  return `waiting for ${parts.join(", and ")}`;
}

/** What a Delivered message adds for holders whose agent wrote the generation again after the node had lost it. */
function restoredNote(grant: Grant): string {
  const again = grant.targets.flatMap((t) => {
    const h = grant.holders[holderKey(t.node, t.part)];
    return h?.restoredAt && h.generation === grant.generation ? [`${t.part}@${t.node} at ${h.restoredAt}`] : [];
  });
  return again.length ? ` (written again, the node having lost it: ${again.join(", ")})` : "";
}
