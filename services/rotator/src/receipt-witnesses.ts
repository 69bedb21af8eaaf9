/**
 * The second witness of an agent-held part's confirmation: what its node's receipt says the part
 * applied (`DeliveryReceipt.confirmed`, which only that node's agent may write, after the files,
 * the hook and a login with k+1, and before its ack). ack-tracker.ts counts such a part's ack
 * only once its receipt agrees.
 */
import type { DeliveryReceipt, HolderEndpoint } from "@mesh/shared";

/** What an agent's receipt says its part applied (`DeliveryReceipt.confirmed`). */
export interface ReceiptConfirmation {
  rotation: string;
  generation: number;
}

/**
 * The confirmations the agents' receipts witness, by holder consumer (`<stream>/<consumer>`),
 * fed by the rotator's watch of `mesh-receipts` (holder-consumers.ts) from before the tracker
 * starts: the tracker counts an agent-held part's ack once its receipt agrees, in whichever order
 * the two arrive.
 */
export class ReceiptWitnesses {
  private readonly byConsumer = new Map<string, ReceiptConfirmation>();
  private listener: ((id: string, c: ReceiptConfirmation) => void) | undefined;

  /** The receipt of the part whose consumer is `endpoint` says `confirmed` (undefined: nothing, or it was withdrawn). */
  note(endpoint: Pick<HolderEndpoint, "stream" | "consumer">, confirmed: ReceiptConfirmation | undefined): void {
    const id = `${endpoint.stream}/${endpoint.consumer}`;
    if (!confirmed) {
      this.byConsumer.delete(id);
      return;
    }
    this.byConsumer.set(id, confirmed);
    this.listener?.(id, confirmed);
  }

  /** What receipt `r` of the part whose consumer is `endpoint` witnesses (undefined or withdrawn: nothing). */
  noteReceipt(endpoint: Pick<HolderEndpoint, "stream" | "consumer">, r: DeliveryReceipt | undefined): void {
    this.note(endpoint, r && !r.withdrawnAt ? r.confirmed : undefined);
  }

  get(id: string): ReceiptConfirmation | undefined {
    return this.byConsumer.get(id);
  }

  /** Calls `f` with every confirmation noted from now on. */
  listen(f: (id: string, c: ReceiptConfirmation) => void): void {
    this.listener = f;
  }
}
