/**
 * A node that lost what its agent wrote (its bindings root emptied, the node re-imaged) gets it
 * back without a rotation. The node's receipts say which part holds which grant; a binding one
 * says is held and that is not on disk is fetched at the grant's generation and written again,
 * and its receipt says so (`restored`), which the grant's `Delivered` message shows. Run when
 * the agent starts and before each probe round, so that it is back within one probe interval
 * and the probes that follow, which the verifier reads, find it there.
 */
import { DeliveryReceipt, Grant, bindingNameOf, envDigest, errorMessage, grantId, isTarget, keys, parseReceiptKey, type KeyPair } from "@mesh/shared";
import { fetchCredential, listJson, mutateJson, readJson, type Store } from "@mesh/shared/runtime";
import type { Logger } from "@mesh/shared/service";
import { bindingGeneration, writeFetchedBinding, type BindingWriteResult } from "./bindings-writer.js";
import { receiptRestored } from "./receipts.js";

export interface RestoreOptions {
  store: Store;
  node: string;
  bindingsRoot: string;
  /** The agent's sealing key, which the values come sealed to. */
  key: KeyPair;
  graceMs: number;
  fetchTimeoutMs?: number;
  log: Logger;
  /** Told of each binding written again (to prune replaced files, warn of the env file). */
  onWritten?: (b: { module: string; part: string; binding: string }, written: BindingWriteResult) => void;
}

/** One binding written again. */
export interface Restored {
  grant: string;
  part: string;
  generation: number;
}

/**
 * Writes again every binding this node's receipts say a part holds and that is gone from the
 * bindings root. A grant gone, a part no longer a target, a receipt that says it holds nothing:
 * nothing to write. A binding that cannot be fetched now is tried again at the next round.
 */
export async function restoreLostBindings(o: RestoreOptions): Promise<Restored[]> {
  const { store, node, bindingsRoot: root, log } = o;
  const receipts = await listJson(store.kv.receipts, DeliveryReceipt, keys.receiptsOfNode(node));
  const restored: Restored[] = [];
  for (const { key, value: receipt } of receipts) {
    const k = parseReceiptKey(key);
    if (!k || k.node !== node || receipt.generation === 0 || receipt.withdrawnAt) continue;
    const binding = bindingNameOf(k.part, k.requirement);
    if (bindingGeneration(root, k.module, k.part, binding) !== undefined) continue;
    const id = grantId(k.module, k.requirement);
    const glog = log.child({ grant: id, part: k.part });
    try {
      const grant = (await readJson(store.kv.grants, keys.grant(k.module, k.requirement), Grant))?.value;
      if (!grant || grant.generation === 0 || !isTarget(grant, node, k.part)) continue;
      const fetched = await fetchCredential(store.nc, { grant: id, part: k.part, node, generation: grant.generation }, o.key, {
        timeoutMs: o.fetchTimeoutMs ?? 5_000,
      });
      // Looked at again with no await before the write: a delivery or a rotation may have written it meanwhile.
      if (bindingGeneration(root, k.module, k.part, binding) !== undefined) continue;
      const written = writeFetchedBinding(root, { module: k.module, part: k.part, binding }, fetched, grant.env, o.graceMs);
      o.onWritten?.({ module: k.module, part: k.part, binding }, written);
      await mutateJson(store.kv.receipts, key, DeliveryReceipt, (r) => receiptRestored(r, fetched.generation, new Date(), envDigest(grant.env)));
      glog.warn(
        { generation: fetched.generation, path: written.path },
        `the binding of ${id} for part ${k.part} was gone from this node (its bindings root emptied?); generation ${fetched.generation} written again, no rotation needed`,
      );
      restored.push({ grant: id, part: k.part, generation: fetched.generation });
    } catch (e) {
      glog.warn(
        { err: e },
        `the binding of ${id} for part ${k.part} is gone from this node and could not be written again now (${errorMessage(e)}); tried again at the next probe`,
      );
    }
  }
  return restored;
}
