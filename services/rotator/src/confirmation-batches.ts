/**
 * Confirmations as they arrive (on `subjects.rotationConfirm`), gathered per grant and
 * recorded in batches: one compare-and-set write of the rotation record per batch (it rewrites
 * the whole record, about 42 KB at 1,000 holders), one batch in work per grant at a time, and
 * grants independent of each other. One sent as a request (the agents') is answered only once
 * it is in the record (`{ok: true}`), or refused (a `Conflict` with the reason); when the write
 * fails the answer is a retryable error, and the holder sends it again. One sent as a plain
 * message (the SDK's) is not answered: when the write fails it is tried again with the next
 * batch (a few times), and while the record misses it the rotator tells its holder again.
 *
 * A batch gathers for up to `gatherMs` after its first confirmation, and is written at once when
 * it holds as many confirmations as the rotation still misses (it may complete it): the commit
 * waits for no timer, and a rotation fanned out to thousands of holders is written a few times
 * instead of once per turn of the event loop (each write of the whole record also costs the
 * server its storage).
 */
import type { Msg } from "@nats-io/transport-node";
import { Confirmation, ErrorCodes, confirmationSubject, errorMessage, keys, parseGrantId, type Logger } from "@mesh/shared";
import type { ConfirmationOutcome } from "./rotation-machine.js";

const OK = JSON.stringify({ ok: true });
const error = (code: string, message: string, retryable: boolean) => JSON.stringify({ ok: false, error: { code, message, retryable } });

/** Default of {@link ConfirmationBatchesOptions.gatherMs}. */
export const GATHER_MS = 20;
/** How many failed writes a plain confirmation (nobody to answer) goes through before it is left to the holder's next notice. */
const PLAIN_TRIES = 5;

export interface ConfirmationBatchesOptions {
  log: Logger;
  /** Records a batch of one grant (`<module>.<requirement>`); `done` when every holder has confirmed. */
  record(key: string, batch: Confirmation[]): Promise<{ refused: ConfirmationOutcome["refused"]; done: boolean }>;
  /** How many holders the rotation of a grant key still misses, as far as this instance knows; undefined when it does not know. */
  missing(key: string): number | undefined;
  /** Called when a batch left no holder missing. */
  onDone(key: string): void;
  /** Waits while the rotator's test hook holds it. */
  holdIfPaused(): Promise<void>;
  /** How long a batch gathers at most before it is written; default {@link GATHER_MS}. */
  gatherMs?: number;
}

interface Item {
  m: Msg;
  c: Confirmation;
  /** Failed writes so far (plain confirmations only: a request is answered and sent again by its holder). */
  failed?: number;
}

interface Pending {
  items: Item[];
  /** Confirmations that would make the batch worth writing at once (the rotation's missing count when it began gathering). */
  enough: number;
  /** Ends the gathering of the current batch early; set while it gathers. */
  wake: (() => void) | undefined;
}

export class ConfirmationBatches {
  private readonly grants = new Map<string, Pending>();
  /** The batches being written per grant, one after the other, until none is left. */
  private readonly writing = new Set<Promise<void>>();

  constructor(private readonly opts: ConfirmationBatchesOptions) {}

  /** Takes one confirmation request: refused at once when it is no confirmation of the grant its subject names. */
  add(m: Msg): void {
    let c: Confirmation;
    try {
      c = Confirmation.parse(m.json());
    } catch {
      this.opts.log.warn({ subject: m.subject }, "a confirmation request is not a Confirmation; refused");
      m.respond(error(ErrorCodes.InvalidRequest, "not a Confirmation (rotation, grant, holder, generation, confirmedAt)", false));
      return;
    }
    // The subject names the holder's node and part: an identity allowed only its own part's
    // subject cannot confirm for another holder.
    const subject = confirmationSubject(c.grant, c.holder);
    const id = parseGrantId(c.grant);
    if (!id || subject !== m.subject) {
      this.opts.log.warn({ subject: m.subject, holder: c.holder, grant: c.grant }, "a confirmation does not match its subject; refused");
      m.respond(
        error(
          ErrorCodes.InvalidRequest,
          subject
            ? `a confirmation of grant ${c.grant} by ${c.holder} belongs on ${subject}, not on ${m.subject}`
            : `confirmation of grant ${JSON.stringify(c.grant)} by holder ${JSON.stringify(c.holder)}: expected ids <module>/<requirement> and <node>/<part>[/<instance>]`,
          false,
        ),
      );
      return;
    }
    const key = keys.grant(id.module, id.requirement);
    const p = this.grants.get(key);
    if (p) {
      if (p.items.push({ m, c }) >= p.enough) p.wake?.();
      return;
    }
    const q: Pending = { items: [{ m, c }], enough: Infinity, wake: undefined };
    this.grants.set(key, q);
    const w = this.write(key, q);
    this.writing.add(w);
    void w.then(() => this.writing.delete(w));
  }

  /** Settles when nothing is being written. */
  async drain(): Promise<void> {
    await Promise.allSettled([...this.writing]);
  }

  /** Until `p` holds as many confirmations as its rotation misses, or `gatherMs` passed. */
  private gather(key: string, p: Pending): Promise<void> {
    p.enough = this.opts.missing(key) ?? Infinity;
    if (p.items.length >= p.enough) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const timer = setTimeout(done, this.opts.gatherMs ?? GATHER_MS);
      function done() {
        clearTimeout(timer);
        resolve();
      }
      p.wake = done;
    }).finally(() => {
      p.wake = undefined;
      p.enough = Infinity;
    });
  }

  private async write(key: string, p: Pending): Promise<void> {
    try {
      while (p.items.length) {
        await this.gather(key, p);
        await this.opts.holdIfPaused();
        const items = p.items;
        p.items = [];
        try {
          const { refused, done } = await this.opts.record(
            key,
            items.map((i) => i.c),
          );
          const reasons = new Map<Confirmation, string>();
          for (const x of refused) {
            this.opts.log.warn({ holder: x.confirmation.holder, grant: x.confirmation.grant, rotation: x.confirmation.rotation }, `confirmation refused: ${x.reason}`);
            reasons.set(x.confirmation, x.reason);
          }
          for (const i of items) {
            const why = reasons.get(i.c);
            i.m.respond(why === undefined ? OK : error(ErrorCodes.Conflict, why, false));
          }
          if (done) this.opts.onDone(key);
        } catch (e) {
          this.opts.log.warn({ err: e, grant: key }, "could not record confirmations; their holders send them again, or they are tried again");
          const answer = error(ErrorCodes.Unavailable, `the rotator could not record the confirmation (${errorMessage(e)}); send it again`, true);
          const again: Item[] = [];
          for (const i of items) {
            if (i.m.reply) i.m.respond(answer);
            else if ((i.failed = (i.failed ?? 0) + 1) < PLAIN_TRIES) again.push(i);
          }
          if (again.length) {
            // Not at once: what failed the write (the server recovering, say) may last a moment.
            await new Promise((r) => setTimeout(r, 100 * 2 ** (again[0]!.failed ?? 1)));
            p.items.unshift(...again);
          }
        }
      }
    } finally {
      // Nothing left (no await since the loop ended): the next confirmation starts anew.
      this.grants.delete(key);
    }
  }
}
