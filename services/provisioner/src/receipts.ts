/**
 * The agents' receipts folded into the grants. A node's agent writes what it did for a part on
 * its node into `mesh-receipts` (its own node's keys, and nothing else: its identity may write
 * no grant); the provisioner, which may, turns each receipt into the grant's holders,
 * `Delivered` and a hook's failure on `Rotating`. The folds are pure and idempotent: a receipt
 * folded twice, or after a newer one, changes nothing more.
 */
import {
  Buckets,
  DeliveryReceipt,
  Durables,
  ErrorCodes,
  Grant,
  Reasons,
  errorMessage,
  isMeshError,
  KeyedQueue,
  getCondition,
  holderKey,
  isTarget,
  keys,
  kvKeyOf,
  parseReceiptKey,
  setCondition,
  withDeliveredCondition,
} from "@mesh/shared";
import { consumeKeys, mutateJson, readJson, type Consumption, type Store } from "@mesh/shared/runtime";
import type { Logger } from "@mesh/shared/service";

/**
 * The grant with `node/part` recorded as holding `generation`, its env file written for the
 * mapping whose fingerprint is `env` (`envDigest`), written again at `restoredAt` when the node
 * had lost it, and `Delivered` recomputed; or undefined when there is nothing to write: the
 * grant is gone, the part is no longer a target, or the holder already has a newer generation,
 * or this one as it is.
 */
export function recordHolder(
  grant: Grant | undefined,
  node: string,
  part: string,
  generation: number,
  now: Date,
  env = "",
  restoredAt?: string,
): Grant | undefined {
  if (!grant || !isTarget(grant, node, part)) return undefined;
  const key = holderKey(node, part);
  const held = grant.holders[key];
  const newer = (held?.generation ?? 0) < generation;
  // The same generation with its env file written for another mapping, or written again after it was lost: that is recorded, not older generations.
  const again = held?.generation === generation && ((held.env ?? "") !== env || (restoredAt !== undefined && held.restoredAt !== restoredAt));
  if (!newer && !again) return undefined;
  const state = { generation, deliveredAt: now.toISOString(), ...(env ? { env } : {}), ...(restoredAt ? { restoredAt } : {}) };
  const updated: Grant = { ...grant, holders: { ...grant.holders, [key]: state } };
  // Held again: its withdrawal is over.
  if (updated.withdrawn && Object.hasOwn(updated.withdrawn, key)) {
    const { [key]: _over, ...rest } = updated.withdrawn;
    updated.withdrawn = Object.keys(rest).length ? rest : undefined;
  }
  return { ...updated, conditions: withDeliveredCondition(updated, now) };
}

/**
 * The grant with `Delivered` set to False/`DeliveryFailed` naming the holder and why, so a
 * delivery that cannot succeed is visible in `meshctl status` and not only in a log. Undefined
 * when there is nothing to write (grant gone, part no longer a target, generation superseded,
 * or the same failure already recorded). `message` carries no secret value (the agent's own words).
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

/** How a hook failure's `Rotating` message starts: the rotation and the holder it waits for. */
function hookFailurePrefix(rotation: string, node: string, part: string): string {
  return `rotation ${rotation} waits for ${holderKey(node, part)}: `;
}

/** A hook's failure as a receipt says it. */
export type HookFailure = NonNullable<NonNullable<DeliveryReceipt["hook"]>["failed"]>;

/**
 * The grant with `Rotating` saying that rotation `rotation` (to `generation`) waits for
 * `node/part` because its hook failed (`HookNotAllowed` or `HookFailed`, with the agent's
 * message, which names the hook and what to do), so it is seen in `meshctl status` and not
 * only in the agent's log. Undefined when there is nothing to write: the grant is gone, the
 * part is no longer a target, the rotation committed (the grant is on `generation` already),
 * or the same is said already. `Rotating` is the rotator's, which sets it again at the next
 * state it enters; the agent's receipt says it again at each attempt.
 */
export function recordHookFailure(
  grant: Grant | undefined,
  node: string,
  part: string,
  hook: { rotation: string; generation: number; failed: Pick<HookFailure, "reason" | "message"> },
  now: Date,
): Grant | undefined {
  if (!grant || !isTarget(grant, node, part) || grant.generation >= hook.generation) return undefined;
  const reason = hook.failed.reason === "HookNotAllowed" ? Reasons.HookNotAllowed : Reasons.HookFailed;
  const conditions = setCondition(
    grant.conditions,
    { type: "Rotating", status: "True", reason, message: `${hookFailurePrefix(hook.rotation, node, part)}${hook.failed.message}` },
    now,
  );
  return conditions === grant.conditions ? undefined : { ...grant, conditions };
}

/**
 * The grant with the `Rotating` condition {@link recordHookFailure} wrote for `node/part` in
 * rotation `rotation` back to `AwaitingHolders`, once its hook ran and it confirmed (the rotator
 * removes it at the commit); undefined when `Rotating` says anything else (the rotator's own,
 * another holder's).
 */
export function clearHookFailure(grant: Grant | undefined, node: string, part: string, rotation: string, now: Date): Grant | undefined {
  const c = grant ? getCondition(grant.conditions, "Rotating") : undefined;
  if (
    !grant ||
    !c ||
    (c.reason !== Reasons.HookNotAllowed && c.reason !== Reasons.HookFailed) ||
    !c.message.startsWith(hookFailurePrefix(rotation, node, part))
  )
    return undefined;
  const message = `rotation ${rotation}: ${holderKey(node, part)} confirmed once its hook ran; waiting for the other holders, if any, to confirm`;
  return { ...grant, conditions: setCondition(grant.conditions, { type: "Rotating", status: "True", reason: Reasons.AwaitingHolders, message }, now) };
}

/**
 * The grant with everything receipt `r` of `node/part` says folded in: the generation it
 * holds, a delivery that failed past it, its hook's failure in a rotation or that the hook
 * ran; for a part that is no longer a target, that its binding was removed (it leaves the
 * holders). Undefined when the grant is gone or nothing changes.
 */
export function foldReceipt(grant: Grant | undefined, node: string, part: string, r: DeliveryReceipt, now: Date): Grant | undefined {
  if (!grant) return undefined;
  if (!isTarget(grant, node, part)) {
    // Its binding is gone from the node: it no longer holds anything of the grant.
    const key = holderKey(node, part);
    if (!r.withdrawnAt || !Object.hasOwn(grant.holders, key)) return undefined;
    const { [key]: _gone, ...holders } = grant.holders;
    return { ...grant, holders, withdrawn: { ...grant.withdrawn, [key]: r.withdrawnAt } };
  }
  let g = grant;
  if (r.generation > 0) {
    const restoredAt = r.restored?.generation === r.generation ? r.restored.at : undefined;
    g = recordHolder(g, node, part, r.generation, r.deliveredAt ? new Date(r.deliveredAt) : now, r.env, restoredAt) ?? g;
  }
  if (r.failure && r.failure.generation > r.generation) g = recordDeliveryFailure(g, node, part, r.failure.generation, r.failure.message, now) ?? g;
  if (r.hook) {
    const { failed, ...hook } = r.hook;
    g = (failed ? recordHookFailure(g, node, part, { ...hook, failed }, now) : clearHookFailure(g, node, part, hook.rotation, now)) ?? g;
  }
  return g === grant ? undefined : g;
}

/**
 * Folds the receipt stored under `key` into its grant. A key that names no holder, or a value
 * that is not a receipt, is logged and left: only an agent writes there, and only its own
 * node's keys, so either is a bug or an agent's lie about its own node, not another's. Throws
 * to be retried (the store did not answer).
 */
export async function foldReceiptKey(store: Store, key: string, log: Logger): Promise<void> {
  const holder = parseReceiptKey(key);
  if (!holder) {
    log.warn({ bucket: "receipts", key }, "a receipt key names no node, module, requirement and part; left alone");
    return;
  }
  const found = await readJson(store.kv.receipts, key, DeliveryReceipt).catch((e: unknown) => {
    if (!(e instanceof SyntaxError) && !isMeshError(e, ErrorCodes.Internal)) throw e;
    log.warn({ key, node: holder.node, err: errorMessage(e) }, "a receipt is not a DeliveryReceipt; left alone");
    return null;
  });
  if (!found) return;
  const { node, module, requirement, part } = holder;
  await mutateJson(store.kv.grants, keys.grant(module, requirement), Grant, (g) => foldReceipt(g, node, part, found.value, new Date()));
}

/**
 * Folds every receipt into its grant as it is written, through the durable consumer all
 * provisioner instances share (so each receipt is folded by one of them, and those written
 * while none ran are folded when one starts).
 */
export function foldReceipts(opts: { store: Store; log: Logger }): Promise<Consumption> {
  const { store, log } = opts;
  return consumeKeys({
    store,
    durable: Durables.provisionerReceipts,
    keyOf: kvKeyOf(Buckets.receipts),
    queue: new KeyedQueue((key) => foldReceiptKey(store, key, log), 16),
    log,
  });
}
