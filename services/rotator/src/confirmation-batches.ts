/**
 * Confirmations as they come off the stream, gathered per grant and recorded in batches: one
 * compare-and-set write of the rotation record per batch (it rewrites the whole record, about
 * 42 KB at 1,000 holders), one batch in work per grant at a time while the next one gathers,
 * and grants independent of each other. A confirmation is acknowledged only once it is in the
 * record (or refused); when the write fails it comes back.
 */
import type { JsMsg } from "@nats-io/jetstream";
import { Confirmation, errorMessage, keys, parseGrantId, subjects, type Logger } from "@mesh/shared";
import type { ConfirmationOutcome } from "./rotation-machine.js";


export interface ConfirmationBatchesOptions {
  log: Logger;
  /** Records a batch of one grant (`<module>.<requirement>`); `done` when every holder has confirmed. */
  record(key: string, batch: Confirmation[]): Promise<{ refused: ConfirmationOutcome["refused"]; done: boolean }>;
  /** Called when a batch left no holder missing. */
  onDone(key: string): void;
  /** Waits while the rotator's test hook holds it. */
  holdIfPaused(): Promise<void>;
}

interface Pending {
  items: Array<{ m: JsMsg; c: Confirmation }>;
  /** The batches being written, one after the other, until none is left. */
  writing: Promise<void>;
}

export class ConfirmationBatches {
  private readonly grants = new Map<string, Pending>();

  constructor(private readonly opts: ConfirmationBatchesOptions) {}

  /** Takes one message of the confirmation stream: terminated when it is no confirmation of the grant its subject names. */
  add(m: JsMsg): void {
    let c: Confirmation;
    try {
      c = Confirmation.parse(m.json());
    } catch {
      this.opts.log.warn({ subject: m.subject }, "a message on the confirmation stream is not a Confirmation; dropped");
      m.term();
      return;
    }
    const id = parseGrantId(c.grant);
    if (!id || m.subject !== subjects.rotationConfirm(id.module, id.requirement)) {
      this.opts.log.warn({ subject: m.subject, holder: c.holder, grant: c.grant }, "a confirmation does not match its subject; refused");
      m.term();
      return;
    }
    const key = keys.grant(id.module, id.requirement);
    const p = this.grants.get(key);
    if (p) {
      p.items.push({ m, c });
      return;
    }
    const q: Pending = { items: [{ m, c }], writing: Promise.resolve() };
    this.grants.set(key, q);
    // From the next turn of the event loop: the rest of what the server sent at once joins the first batch.
    q.writing = new Promise<void>((r) => setImmediate(r)).then(() => this.write(key, q));
  }

  /** Settles when nothing is being written. */
  async drain(): Promise<void> {
    await Promise.allSettled([...this.grants.values()].map((p) => p.writing));
  }

  private async write(key: string, p: Pending): Promise<void> {
    try {
      while (p.items.length) {
        await this.opts.holdIfPaused();
        const items = p.items;
        p.items = [];
        try {
          const { refused, done } = await this.opts.record(
            key,
            items.map((i) => i.c),
          );
          for (const x of refused) {
            this.opts.log.warn({ holder: x.confirmation.holder, grant: x.confirmation.grant, rotation: x.confirmation.rotation }, `confirmation refused: ${x.reason}`);
          }
          for (const i of items) i.m.ack();
          if (done) this.opts.onDone(key);
        } catch (e) {
          this.opts.log.warn({ err: errorMessage(e), grant: key }, "could not record confirmations; they come back");
          for (const i of items) i.m.nak(500);
        }
      }
    } finally {
      // Nothing left (no await since the loop ended): the next confirmation starts anew.
      this.grants.delete(key);
    }
  }
}
