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
 * older one is over. `env` is the fingerprint (`envDigest`) of the `env` mapping the part's env
 * file was written with ("" for none).
 */
export function receiptDelivered(r: DeliveryReceipt | undefined, generation: number, now: Date, env = ""): DeliveryReceipt {
  const { failure, withdrawnAt: _withdrawn, env: _env, ...rest } = r ?? { generation: 0 };
  return {
    ...rest,
    generation: Math.max(rest.generation, generation),
    deliveredAt: now.toISOString(),
    ...(failure && failure.generation > generation ? { failure } : {}),
    ...(env ? { env } : {}),
  };
}

/**
 * Generation `generation` written again, now, because the part's binding was gone from the node
 * (a bindings root emptied, a node re-imaged): delivered, and said so.
 */
export function receiptRestored(r: DeliveryReceipt | undefined, generation: number, now: Date, env = ""): DeliveryReceipt {
  return { ...receiptDelivered(r, generation, now, env), restored: { generation, at: now.toISOString() } };
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

/**
 * The part applied generation `generation` of rotation `rotation` (files written, hook run, a
 * login with it proven): the receipt's witness of the confirmation, written before the ack. A
 * hook failure it said in this rotation is over. Undefined when the receipt says so already.
 */
export function receiptConfirmed(r: DeliveryReceipt | undefined, rotation: string, generation: number): DeliveryReceipt | undefined {
  const cur = r ?? { generation: 0 };
  // A failure of the hook in this rotation is over: the hook without `failed` says it ran.
  const hook = cur.hook?.rotation === rotation && cur.hook.failed ? { rotation, generation: cur.hook.generation } : cur.hook;
  if (cur.confirmed?.rotation === rotation && cur.confirmed.generation === generation && hook === cur.hook) return undefined;
  return { ...cur, ...(hook ? { hook } : {}), confirmed: { rotation, generation } };
}

/** The part's binding was removed, now (it is no longer a target): it holds nothing. */
export function receiptWithdrawn(now: Date): DeliveryReceipt {
  return { generation: 0, withdrawnAt: now.toISOString() };
}
