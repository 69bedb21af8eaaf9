/**
 * Publishing to a JetStream stream and waiting until it is stored (its PubAck), as
 * `js.publish` does, but with one reply subscription per publisher instead of a request per
 * message. nats.js makes every request build Error objects with stack traces (for its async
 * traces, and again when the request completes); at a rotation fanned out to 1,000 holders
 * that was about a quarter of the holders' CPU, for the one confirmation each sends. The
 * reply subject is under the connection's inbox prefix, as a request's would be, so the
 * same permissions apply.
 */
import { randomBytes } from "node:crypto";
import { ErrorCodes, MeshError, type NatsConnection, type traceHeaders } from "@mesh/shared";

type Subscription = ReturnType<NatsConnection["subscribe"]>;
type Msg = Parameters<NonNullable<NonNullable<Parameters<NatsConnection["subscribe"]>[1]>["callback"]>>[1];
type MsgHdrs = ReturnType<typeof traceHeaders>;

/** JetStream's de-duplication header. */
const MSG_ID = "Nats-Msg-Id";

export class StoredPublisher {
  private sub: Subscription | undefined;
  private readonly inbox: string;
  private next = 0;
  private readonly waiting = new Map<string, { resolve(): void; reject(e: Error): void; timer: NodeJS.Timeout }>();

  constructor(
    private readonly nc: NatsConnection,
    private readonly timeoutMs: number,
  ) {
    // nats.js keeps the prefix in the connection's options (`_INBOX` unless the application set one).
    const prefix = (nc as { options?: { inboxPrefix?: string } }).options?.inboxPrefix || "_INBOX";
    this.inbox = `${prefix}.${randomBytes(12).toString("base64url")}`;
  }

  /**
   * Publishes `data` on `subject` with `headers` (and `msgID` for de-duplication); resolves
   * once a stream stored it, rejects with a retryable `Unavailable` when no stream takes the
   * subject, JetStream refused it, or no acknowledgement came within the timeout.
   */
  publish(subject: string, data: string, headers: MsgHdrs, msgID: string): Promise<void> {
    // Subscribed before the first publish, on the same connection: the server knows it before the message.
    this.sub ??= this.nc.subscribe(`${this.inbox}.*`, { callback: (err, m) => void (err || this.settle(m)) });
    const reply = `${this.inbox}.${this.next++}`;
    headers.set(MSG_ID, msgID);
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiting.delete(reply);
        reject(new MeshError(ErrorCodes.Unavailable, `JetStream did not acknowledge a message on ${subject} within ${this.timeoutMs} ms; check that nats-server runs with JetStream`, { retryable: true }));
      }, this.timeoutMs);
      this.waiting.set(reply, { resolve, reject, timer });
      this.nc.publish(subject, data, { reply, headers });
    });
  }

  private settle(m: Msg): void {
    const w = this.waiting.get(m.subject);
    if (!w) return;
    this.waiting.delete(m.subject);
    clearTimeout(w.timer);
    // A status reply without data: no stream takes the subject (503, "no responders").
    if (m.data.length === 0) {
      w.reject(new MeshError(ErrorCodes.Unavailable, `no JetStream stream stored the message (status ${m.headers?.code ?? "?"}); check that nats-server runs with JetStream and the mesh's streams exist`, { retryable: true }));
      return;
    }
    let ack: { stream?: string; error?: { code?: number; description?: string } } | undefined;
    try {
      ack = m.json();
    } catch {
      ack = undefined;
    }
    if (!ack?.stream || ack.error) {
      w.reject(new MeshError(ErrorCodes.Unavailable, `JetStream did not store the message: ${ack?.error?.description ?? "not an acknowledgement"}`, { retryable: true }));
      return;
    }
    w.resolve();
  }

  /** Stops listening; what still waits is rejected. */
  close(): void {
    this.sub?.unsubscribe();
    this.sub = undefined;
    for (const w of this.waiting.values()) {
      clearTimeout(w.timer);
      w.reject(new MeshError(ErrorCodes.Unavailable, "the holder stopped before JetStream acknowledged its confirmation", { retryable: true }));
    }
    this.waiting.clear();
  }
}
