/**
 * Who has confirmed a rotation, read from JetStream itself: each holder's consumer's ack floor
 * against the broadcast's sequence in its stream (the rotation record names both). What
 * `meshctl trace` shows of a running rotation, and what tests check a record against; the
 * rotator counts the same acks live from the server's ack metrics.
 */
import { JetStreamApiError, type JetStreamManager } from "@nats-io/jetstream";
import { broadcastKey, consumerMismatch, holderEndpoint, type HolderEndpoint } from "./holder-streams.js";
import type { Rotation } from "./schemas/rotation.js";

/** One holder's consumer as JetStream has it. */
export interface HolderConsumerState {
  holder: string;
  stream: string;
  consumer: string;
  /** The broadcast's sequence in that stream (0: none was published there yet). */
  seq: number;
  /** The consumer's ack floor (stream sequence); undefined when the consumer does not exist. */
  ackFloor?: number;
  /** Its last activity the server recorded (ISO), when it has acknowledged anything. */
  lastActive?: string;
  /** Why its acks do not count, when its configuration is not the one the control plane made. */
  mismatch?: string;
  /** True when the ack floor has reached the broadcast's sequence: the holder confirmed. */
  acked: boolean;
  /** The server said the consumer does not exist (vanished with its server, removed for inactivity, or never made). */
  vanished?: true;
  /**
   * The consumer has not acknowledged the broadcast and has nothing left to deliver nor awaiting
   * an ack: its stream does not seem to hold the broadcast (restored from a backup taken before
   * it, or made again empty), so there is nothing for the holder to confirm until it is
   * published again.
   */
  unheld?: true;
}

/**
 * Where each holder of `r` (or `only` of them) takes its broadcast: its endpoint (stream,
 * consumer, subject; undefined for a holder id that names none) and the broadcast's sequence in
 * that stream (0: none was published there yet). Pure.
 */
export function broadcastTargets(r: Rotation, only?: readonly string[]): Array<{ holder: string; endpoint: HolderEndpoint | undefined; seq: number }> {
  const seqs = new Map(r.broadcasts.map((b) => [broadcastKey(b.stream, b.subject), b.seq]));
  return (only ?? Object.keys(r.holders)).map((holder) => {
    const endpoint = holderEndpoint(r.grant, holder);
    return { holder, endpoint, seq: endpoint ? (seqs.get(broadcastKey(endpoint.stream, endpoint.subject)) ?? 0) : 0 };
  });
}

/** The consumer state of every holder of `r`, or of `only` of them (`concurrency` lookups at a time). */
export async function readHolderAcks(
  jsm: JetStreamManager,
  r: Rotation,
  opts: { only?: readonly string[]; concurrency?: number } = {},
): Promise<HolderConsumerState[]> {
  const targets = broadcastTargets(r, [...(opts.only ?? Object.keys(r.holders))].sort());
  const concurrency = opts.concurrency ?? 32;
  const out: HolderConsumerState[] = new Array(targets.length);
  let i = 0;
  const worker = async () => {
    while (i < targets.length) {
      const n = i++;
      const { holder, endpoint: e, seq } = targets[n]!;
      if (!e) {
        out[n] = { holder, stream: "", consumer: "", seq: 0, acked: false };
        continue;
      }
      try {
        const info = await jsm.consumers.info(e.stream, e.consumer);
        const mismatch = consumerMismatch(info, e);
        const ackFloor = info.ack_floor?.stream_seq ?? 0;
        const lastActive = (info.ack_floor as unknown as { last_active?: string } | undefined)?.last_active;
        const acked = !mismatch && seq > 0 && ackFloor >= seq;
        // Not the delivered sequence: a filtered consumer's moves past other subjects' messages, which after a restore may hold the broadcast's.
        const unheld = !acked && !mismatch && seq > 0 && info.num_pending === 0 && info.num_ack_pending === 0;
        out[n] = {
          holder,
          stream: e.stream,
          consumer: e.consumer,
          seq,
          ackFloor,
          ...(lastActive ? { lastActive } : {}),
          ...(mismatch ? { mismatch } : {}),
          acked,
          ...(unheld ? { unheld: true as const } : {}),
        };
      } catch (err) {
        const vanished = err instanceof JetStreamApiError && /not found/i.test(err.message);
        out[n] = { holder, stream: e.stream, consumer: e.consumer, seq, acked: false, ...(vanished ? { vanished: true as const } : {}) };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, targets.length) }, worker));
  return out;
}
