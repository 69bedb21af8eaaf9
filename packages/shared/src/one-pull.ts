/**
 * Pulling a durable consumer one message at a time over one subscription for the puller's life,
 * for a holder's consumer (`max_ack_pending: 1`, holder-streams.ts). The client's `fetch` makes a
 * subscription, a heartbeat monitor and an iterator for every pull, and unsubscribes when it is
 * over: three writes to the socket and that machinery per rotation for each holder, and a message
 * the server delivers to a pull the client has given up on (its heartbeats late on a busy machine)
 * goes to an inbox nobody listens on any more, so the holder gets it only after the ack wait
 * (30 s). Here every pull answers on the same inbox, so no delivery is lost to an old pull, and
 * the next pull leaves with the ack of the message before it, in the same write.
 *
 * One pull is out at a time, for one message, with an expiry the caller chooses per pull (told
 * whether it is the first pull after a message). After a message, the next pull waits until the
 * message is acked, refused or terminated (the server delivers nothing else meanwhile: one ack
 * pending at most), or at most {@link HOLD_MS}, so a message that supersedes one the application
 * has not confirmed still arrives.
 */
import { createInbox, type Msg, type MsgHdrs, type NatsConnection, type Subscription } from "@nats-io/transport-node";

/** A message delivered to the puller: what a holder reads of it and how it answers. */
export interface PulledMessage {
  subject: string;
  readonly headers: MsgHdrs | undefined;
  /** How often the server has delivered it (1 the first time), from its ack subject. */
  readonly deliveryCount: number;
  json<T = unknown>(): T;
  /** Acknowledges it; the next pull leaves in the same write. */
  ack(): void;
  /** Asks for it again after `delayMs` (at once without). */
  nak(delayMs?: number): void;
  /** Tells the server it is still in work (its ack wait starts again). */
  working(): void;
  /** Tells the server never to deliver it again. */
  term(): void;
}

/** Why a run of pulls ended: no answer to a pull in time, the consumer deleted, JetStream not there, or the puller closed. */
export type PullEnd = "lost" | "deleted" | "unavailable" | "closed";

/** What a status the server sends to a pull's inbox asks of the puller. Pure. */
export function pullStatusAction(code: number, description: string): "ignore" | "pull" | "pause" | "deleted" | "unavailable" {
  if (code === 100) return "ignore"; // idle heartbeat or flow control: not asked for, never an answer
  if (code === 404 || code === 408) return "pull"; // no message within the pull's expiry
  if (code === 409 && /consumer (is )?deleted/i.test(description)) return "deleted";
  if (code === 409 && /leadership/i.test(description)) return "pull"; // a new leader forgot the pulls the old one had
  if (code === 503) return "unavailable"; // no responders: no JetStream (or no such stream) behind the subject
  return "pause"; // another 409 (too many pulls waiting, say): pulled again after a pause
}

/**
 * The delivery count in a JetStream ack subject: `$JS.ACK.<stream>.<consumer>.<delivered>.…`
 * (9 tokens), or with a domain and account hash before the stream (12 or more); 1 when the
 * subject is neither. Pure.
 */
export function deliveryCountOf(reply: string): number {
  const t = reply.split(".");
  const at = t.length === 9 ? 4 : t.length >= 12 ? 6 : -1;
  const n = at < 0 ? NaN : Number(t[at]);
  return Number.isInteger(n) && n > 0 ? n : 1;
}

/** How long a pull may go unanswered past its expiry before it counts as lost (the server answers an expired pull with a 408 at once). */
export const PULL_GRACE_MS = 1_000;
/** At most how long after a message the next pull waits for that message's ack. */
export const HOLD_MS = 1_000;
/** How long after a status that is not an answer (a 409 but a leadership change or a deletion) the next pull waits. */
const PAUSE_MS = 250;

/** How long each pull of a holder (hold-credential.ts in @mesh/client) waits on the server for a rotation before it is made again (the client's default). */
const PULL_EXPIRES_MS = 30_000;
/**
 * How long each pull waits instead while the consumer is new to the holder (for
 * {@link SETTLING_MS} after it found the consumer, or found it again after a pull failed: the
 * consumer made again, or its leader moved), and for the first pull after each message. A pull
 * sent to a consumer whose leader is not settled yet (one just made on a cluster) can be lost,
 * and so is one sent to a consumer that is no longer there (2.9 answers a pull for a missing
 * consumer with nothing): a pull is given up on only {@link PULL_GRACE_MS} past its expiry. The
 * pull after a message is the one that meets a consumer lost while its holder held a rotation
 * unconfirmed (deleted, or lost with its server): short, its holder looks for it again within
 * 3 s at any age, not after 31 s.
 */
const SHORT_PULL_EXPIRES_MS = 2_000;
export const SETTLING_MS = 30_000;

/** The expiry of a holder's next pull: short while its consumer is new to it and for the first pull after a message. Pure. */
export function holderPullExpiresMs(now: number, settledAt: number, afterMessage: boolean): number {
  return afterMessage || now < settledAt ? SHORT_PULL_EXPIRES_MS : PULL_EXPIRES_MS;
}

const ACK = new TextEncoder().encode("+ACK");
const WPI = new TextEncoder().encode("+WPI");
const TERM = new TextEncoder().encode("+TERM");

export class OnePull {
  private readonly sub: Subscription;
  private readonly inbox: string;
  private readonly nextSubject: string;
  /** Pulls sent and not answered yet (a message or a status); more than one only after one was given up on. */
  private outstanding = 0;
  /** The message the next pull waits on, and the timer that stops waiting. */
  private held: { timer: NodeJS.Timeout } | undefined;
  private lostTimer: NodeJS.Timeout | undefined;
  private pauseTimer: NodeJS.Timeout | undefined;
  private running: { expiresMs: (afterMessage: boolean) => number; end: (why: PullEnd) => void } | undefined;
  /** A message was delivered since the last pull left: the next pull is the first after it. */
  private afterMessage = false;
  private closed = false;
  private statusWatch: { stop?: () => void } | undefined;

  constructor(
    private readonly nc: NatsConnection,
    stream: string,
    consumer: string,
    private readonly onMessage: (m: PulledMessage) => void,
    apiPrefix = "$JS.API",
  ) {
    // The connection's own inbox prefix (an identity may subscribe under no other), as the client's fetch reads it.
    this.inbox = createInbox((nc as NatsConnection & { options?: { inboxPrefix?: string } }).options?.inboxPrefix);
    this.nextSubject = `${apiPrefix}.CONSUMER.MSG.NEXT.${stream}.${consumer}`;
    this.sub = nc.subscribe(this.inbox, { callback: (err, m) => (err ? undefined : this.received(m)) });
    void this.watchReconnects();
  }

  /**
   * Pulls until a pull goes unanswered past its expiry, the consumer is deleted, JetStream does
   * not answer, or {@link close}; resolves with which. `expiresMs` is asked for each pull's expiry,
   * with whether that pull is the first since a message was delivered. Messages that arrive
   * between runs are handed over all the same.
   */
  run(expiresMs: (afterMessage: boolean) => number): Promise<PullEnd> {
    if (this.closed) return Promise.resolve("closed");
    this.running?.end("lost");
    return new Promise<PullEnd>((resolve) => {
      this.running = {
        expiresMs,
        end: (why) => {
          this.running = undefined;
          clearTimeout(this.lostTimer);
          clearTimeout(this.pauseTimer);
          resolve(why);
        },
      };
      this.outstanding = 0;
      if (!this.held) this.pull();
    });
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this.held?.timer);
    this.held = undefined;
    this.statusWatch?.stop?.();
    this.running?.end("closed");
    this.sub.unsubscribe();
  }

  private pull(): void {
    const r = this.running;
    if (!r || this.closed || this.held || this.outstanding > 0) return;
    const expires = r.expiresMs(this.afterMessage);
    this.outstanding++;
    try {
      this.nc.publish(this.nextSubject, JSON.stringify({ batch: 1, expires: expires * 1_000_000 }), { reply: this.inbox });
    } catch {
      // The connection closed: the caller's run ends with it.
      r.end(this.nc.isClosed() ? "closed" : "lost");
      return;
    }
    this.afterMessage = false;
    clearTimeout(this.lostTimer);
    this.lostTimer = setTimeout(() => this.running?.end("lost"), expires + PULL_GRACE_MS);
    this.lostTimer.unref?.();
  }

  private answered(): void {
    this.outstanding = Math.max(0, this.outstanding - 1);
    if (this.outstanding === 0) clearTimeout(this.lostTimer);
  }

  private received(m: Msg): void {
    if (this.closed) return;
    // A status has no body; a delivery's headers are decoded only when read (a thousand holders pay for each).
    const h = m.data.length === 0 ? m.headers : undefined;
    if (h && h.code > 0) {
      const action = pullStatusAction(h.code, h.description);
      if (action === "ignore") return;
      this.answered();
      if (action === "deleted" || action === "unavailable") this.running?.end(action);
      else if (action === "pause") {
        clearTimeout(this.pauseTimer);
        this.pauseTimer = setTimeout(() => this.pull(), PAUSE_MS);
        this.pauseTimer.unref?.();
      } else this.pull();
      return;
    }
    if (!m.reply?.startsWith("$JS.ACK.")) return;
    this.answered();
    this.afterMessage = true;
    this.hold();
    this.onMessage(this.pulled(m));
  }

  /** The next pull waits for this message's answer, or {@link HOLD_MS}. */
  private hold(): void {
    clearTimeout(this.held?.timer);
    const timer = setTimeout(() => this.release(), HOLD_MS);
    timer.unref?.();
    this.held = { timer };
  }

  private release(): void {
    if (!this.held) return;
    clearTimeout(this.held.timer);
    this.held = undefined;
    this.pull();
  }

  private pulled(m: Msg): PulledMessage {
    const reply = m.reply!;
    let answered = false;
    // The answer first, then the next pull: both in the connection's next write.
    const answer = (data: Uint8Array | string) => {
      this.nc.publish(reply, data);
      if (!answered) {
        answered = true;
        this.release();
      }
    };
    return {
      subject: m.subject,
      get headers() {
        return m.headers;
      },
      get deliveryCount() {
        return deliveryCountOf(reply);
      },
      json: <T>() => m.json<T>(),
      ack: () => answer(ACK),
      nak: (delayMs?: number) => answer(delayMs && delayMs > 0 ? `-NAK ${JSON.stringify({ delay: delayMs * 1_000_000 })}` : "-NAK"),
      working: () => this.nc.publish(reply, WPI),
      term: () => answer(TERM),
    };
  }

  /** After a reconnect the server may have dropped the pull that was out: one more is sent (a second one is harmless). */
  private async watchReconnects(): Promise<void> {
    const status = this.nc.status() as AsyncIterable<{ type: string }> & { stop?: () => void };
    this.statusWatch = status;
    try {
      for await (const s of status) {
        if (this.closed) break;
        if (s.type === "reconnect" && this.running && !this.held) {
          this.outstanding = 0;
          this.pull();
        }
      }
    } catch {
      // The connection closed.
    }
  }
}
