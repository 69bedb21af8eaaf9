/**
 * The agent's receipts: what it did for a part on its node with one grant, written to its
 * own node's keys of `mesh-receipts` (the only records of a grant's delivery it may write;
 * the provisioner folds them into the grant). Each function is the next receipt from the
 * current one, for `mutateJson`; pure.
 */
import { ErrorCodes, RECEIPT_MESSAGE_MAX, type DeliveryReceipt, type MeshError } from "@mesh/shared";

/** `message` cut to what a receipt carries. */
const bounded = (message: string) => (message.length > RECEIPT_MESSAGE_MAX ? `${message.slice(0, RECEIPT_MESSAGE_MAX - 1)}…` : message);

/**
 * Generation `generation` written (or found written) to the part's binding, now: always a new
 * receipt, so a holder the grant lost is folded in again. A failure of that generation or an
 * older one is over.
 */
export function receiptDelivered(r: DeliveryReceipt | undefined, generation: number, now: Date): DeliveryReceipt {
  const { failure, withdrawnAt: _withdrawn, ...rest } = r ?? { generation: 0 };
  return {
    ...rest,
    generation: Math.max(rest.generation, generation),
    deliveredAt: now.toISOString(),
    ...(failure && failure.generation > generation ? { failure } : {}),
  };
}

/** A delivery of `generation` that cannot succeed as things are, and why; undefined when the receipt says so already (or holds it). */
export function receiptFailed(r: DeliveryReceipt | undefined, generation: number, message: string, now: Date): DeliveryReceipt | undefined {
  const cur = r ?? { generation: 0 };
  const text = bounded(message);
  if (cur.generation >= generation || (cur.failure?.generation === generation && cur.failure.message === text)) return undefined;
  return { ...cur, failure: { generation, message: text, at: now.toISOString() } };
}

/**
 * The part's hook failed in rotation `rotation` (to `generation`), with hook error `e`: new at
 * each attempt, so the grant says it again after the rotator rewrote `Rotating`.
 */
export function receiptHookFailed(r: DeliveryReceipt | undefined, rotation: string, generation: number, e: MeshError, now: Date): DeliveryReceipt {
  const reason = e.code === ErrorCodes.HookNotAllowed ? "HookNotAllowed" : "HookFailed";
  return { ...(r ?? { generation: 0 }), hook: { rotation, generation, failed: { reason, message: bounded(e.message), at: now.toISOString() } } };
}

/** The part's hook ran in rotation `rotation` after it had failed there; undefined when the receipt says no failure of it. */
export function receiptHookRan(r: DeliveryReceipt | undefined, rotation: string): DeliveryReceipt | undefined {
  if (!r?.hook?.failed || r.hook.rotation !== rotation) return undefined;
  return { ...r, hook: { rotation, generation: r.hook.generation } };
}

/** The part's binding was removed, now (it is no longer a target): it holds nothing. */
export function receiptWithdrawn(now: Date): DeliveryReceipt {
  return { generation: 0, withdrawnAt: now.toISOString() };
}
