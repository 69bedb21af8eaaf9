/**
 * A holder's confirmation of a rotation sent as a request to the rotator
 * (`subjects.rotationConfirm`), as a node agent sends it: answered once the confirmation is in
 * the rotation record in JetStream, or refused. A holder that gets no answer (no rotator
 * running, a reply lost) sends it again; repeats are harmless. (The SDK sends its confirmation
 * as a plain message instead, and sends it again when the rotator tells it again.)
 *
 * Requests go through a {@link ReplyLine}: one reply subscription per holder instead of one
 * request object per message. nats.js makes every request build Error objects with stack
 * traces (for its async traces, and again when the request completes), which an agent
 * confirming for many parts at once pays for each.
 */
import { randomBytes } from "node:crypto";
import type { Msg, MsgHdrs, NatsConnection } from "@nats-io/transport-node";
import { ErrorCodes, MeshError, errorMessage } from "./errors.js";
import { errorFromReply } from "./request-json.js";
import type { Confirmation } from "./schemas/rotation.js";
import { confirmationSubject } from "./subjects.js";

/**
 * Requests and their JSON replies over one reply subscription, under the connection's inbox
 * prefix (as a request's own would be, so the same permissions apply).
 */
export class ReplyLine {
  private sub: ReturnType<NatsConnection["subscribe"]> | undefined;
  private readonly inbox: string;
  private next = 0;
  private readonly waiting = new Map<string, { resolve(v: unknown): void; reject(e: Error): void; deadline: number; subject: string }>();
  // One timer for every request waiting (not one each): it looks for the overdue ones.
  private timer: NodeJS.Timeout | undefined;

  /** `service` names who answers, for messages (`rotator`). */
  constructor(
    private readonly nc: NatsConnection,
    private readonly service: string,
    private readonly timeoutMs = 5_000,
  ) {
    // nats.js keeps the prefix in the connection's options (`_INBOX` unless the application set one).
    const prefix = (nc as { options?: { inboxPrefix?: string } }).options?.inboxPrefix || "_INBOX";
    this.inbox = `${prefix}.${randomBytes(12).toString("base64url")}`;
  }

  /**
   * Sends `data` on `subject` and resolves with the decoded JSON reply. Rejects with a
   * retryable `Unavailable` when nobody subscribes to the subject, when no reply comes within
   * the timeout (give or take a tenth of it), or when the line is closed; with a retryable
   * `Internal` when the reply is not JSON.
   */
  request(subject: string, data: string, headers?: MsgHdrs): Promise<unknown> {
    // Subscribed before the first request, on the same connection: the server knows it before the message.
    this.sub ??= this.nc.subscribe(`${this.inbox}.*`, { callback: (err, m) => void (err || this.settle(m)) });
    const reply = `${this.inbox}.${this.next++}`;
    return new Promise<unknown>((resolve, reject) => {
      this.waiting.set(reply, { resolve, reject, deadline: Date.now() + this.timeoutMs, subject });
      this.timer ??= setInterval(() => this.expire(), Math.max(10, this.timeoutMs / 10));
      this.nc.publish(subject, data, headers ? { reply, headers } : { reply });
    });
  }

  private expire(): void {
    const now = Date.now();
    for (const [reply, w] of this.waiting) {
      if (w.deadline > now) continue;
      this.waiting.delete(reply);
      w.reject(new MeshError(ErrorCodes.Unavailable, `the ${this.service} did not answer on ${w.subject} within ${this.timeoutMs} ms; it is asked again`, { retryable: true }));
    }
    this.idle();
  }

  /** Stops the timer when nothing waits. */
  private idle(): void {
    if (this.waiting.size > 0 || !this.timer) return;
    clearInterval(this.timer);
    this.timer = undefined;
  }

  private settle(m: Msg): void {
    const w = this.waiting.get(m.subject);
    if (!w) return;
    this.waiting.delete(m.subject);
    this.idle();
    // A status reply without data: nobody subscribes to the subject (503, "no responders").
    if (m.data.length === 0) {
      w.reject(new MeshError(ErrorCodes.Unavailable, `no ${this.service} answers on ${w.subject} (status ${m.headers?.code ?? "?"}); start mesh-${this.service} (or meshctl up)`, { retryable: true }));
      return;
    }
    try {
      w.resolve(m.json());
    } catch {
      w.reject(new MeshError(ErrorCodes.Internal, `the ${this.service}'s reply on ${w.subject} is not JSON`, { retryable: true }));
    }
  }

  /** Stops listening; what still waits is rejected (retryable `Unavailable`). */
  close(): void {
    this.sub?.unsubscribe();
    this.sub = undefined;
    for (const w of this.waiting.values()) {
      w.reject(new MeshError(ErrorCodes.Unavailable, `stopped before the ${this.service} answered on ${w.subject}`, { retryable: true }));
    }
    this.waiting.clear();
    this.idle();
  }
}

export interface SendConfirmationOptions {
  /** The holder's trace context (W3C headers), for whoever traces confirmations. */
  headers?: MsgHdrs;
  /** Give up (throw the last error) after this long; default: only when `stopped` says so. */
  budgetMs?: number;
  /** Checked between attempts: true ends the sending with the last error. */
  stopped?: () => boolean;
}

/** Longest pause between two sends of one confirmation. */
const RESEND_MAX_MS = 5_000;

/**
 * Sends confirmation `c` over `line` until the rotator recorded it: resolves then. Retries what a
 * retry can help (no rotator running yet, no answer in time, the record busy) with back-off;
 * throws at once when the rotator refuses it (`Conflict`: not a holder of that rotation, or none
 * runs), and the last error once the budget is spent or `stopped` says so.
 */
export async function sendConfirmation(line: ReplyLine, c: Confirmation, opts: SendConfirmationOptions = {}): Promise<void> {
  const subject = confirmationSubject(c.grant, c.holder);
  if (subject === undefined) {
    throw new MeshError(ErrorCodes.InvalidRequest, `confirmation of grant ${JSON.stringify(c.grant)} by holder ${JSON.stringify(c.holder)}: expected ids <module>/<requirement> and <node>/<part>[/<instance>]`);
  }
  const data = JSON.stringify(c);
  const end = opts.budgetMs === undefined ? Infinity : Date.now() + opts.budgetMs;
  for (let attempt = 0; ; attempt++) {
    let err: MeshError;
    try {
      const reply = await line.request(subject, data, opts.headers);
      if ((reply as { ok?: unknown } | null)?.ok === true) return;
      err =
        errorFromReply(reply, `the rotator refused the confirmation of ${c.holder} for rotation ${c.rotation}: `) ??
        new MeshError(ErrorCodes.Internal, `the reply on ${subject} is not the rotator's (neither ok nor an error)`, { retryable: true });
    } catch (e) {
      err = e instanceof MeshError ? e : new MeshError(ErrorCodes.Unavailable, `confirmation on ${subject} failed: ${errorMessage(e)}`, { retryable: true });
    }
    if (!err.retryable || opts.stopped?.() || Date.now() >= end) throw err;
    // Jittered: holders that met the same outage do not come back at one instant.
    await new Promise((r) => setTimeout(r, Math.min(RESEND_MAX_MS, 100 * 2 ** attempt) * (0.5 + Math.random() / 2)));
    if (opts.stopped?.()) throw err;
  }
}
