/**
 * Who has confirmed a running rotation, as JetStream knows it: a holder has confirmed once its
 * consumer acknowledged the broadcast (the stream sequence the rotation record names for its
 * stream, or a later one). Learnt two ways, both from the server:
 * - live, from the ack metrics the server publishes for every ack on a holder's consumer
 *   (`sample_freq: 100%`): `$JS.EVENT.METRIC.CONSUMER.ACK.<stream>.<consumer>`, with the
 *   stream sequence acknowledged and the server's timestamp;
 * - by looking, from each missing holder's consumer (`ack_floor`), when a rotator starts on a
 *   rotation it did not broadcast (a restart, another instance) and on every sweep: a metric is
 *   a plain message, and may be lost. A consumer that has vanished (its server lost, an
 *   inactive SDK consumer removed) is made again, and delivers the broadcast again; a stream
 *   that does not hold the broadcast (restored from an earlier backup, made again empty) is
 *   named to the rotator, which publishes it there again.
 * Every rotator instance hears every metric (no queue group), so whichever instance advances a
 * rotation knows its confirmations without a record rewritten per ack.
 *
 * An agent-held part's ack counts only with a second witness: its node's receipt saying the part
 * applied this rotation's generation (`confirmed`, which only that node's agent may write, and
 * writes before it acks). The ack alone is the server's word that something acknowledged on that
 * consumer; the receipt is the agent's that it did so after applying. An SDK holder's ack stands
 * alone: its identity is the part's own. This is the one place a confirmation reads a record.
 */
import {
  DeliveryReceipt,
  HOLDER_STREAM_PREFIX,
  broadcastKey,
  broadcastTargets,
  keys,
  readHolderAcks,
  type HolderEndpoint,
  type Rotation,
  subjects,
} from "@mesh/shared";
import { readJson, type Store } from "@mesh/shared/runtime";
import type { Logger } from "@mesh/shared/service";
import { ensureAll, type HolderConsumers } from "./holder-consumers.js";
import type { ReceiptWitnesses } from "./receipt-witnesses.js";

/** One holder's confirmation, as the server recorded it. */
export interface HolderAck {
  /** The server's time of the ack (ms since epoch); for a `found` one, when the rotator found it. */
  at: number;
  stream: string;
  consumer: string;
  seq: number;
  /** Found in the consumer's ack floor rather than seen in its metric. */
  found?: true;
}

/** A rotation's broadcast its holder stream does not hold. */
export interface UnheldBroadcast {
  stream: string;
  subject: string;
  /** The sequence the rotation record names for it there. */
  seq: number;
}

interface Tracked {
  key: string;
  rotation: string;
  /** The record's count of broadcasts published again: expectations are made anew when it moves. */
  republished: number;
  /** The generation the rotation moves to: what an agent's receipt must say it applied. */
  to: number;
  /** Each holder's endpoint and the sequence its ack must reach, made once per rotation. */
  endpoints: Array<{ holder: string; endpoint: HolderEndpoint; seq: number }>;
  /** By `<stream>/<consumer>`: the holder, the sequence its ack must reach, and whether its receipt must witness it (an agent-held part). */
  expect: Map<string, { holder: string; seq: number; witnessed: boolean }>;
  acks: Map<string, HolderAck>;
  /** Acks of agent-held parts whose receipt has not said the part applied the rotation (yet), by `<stream>/<consumer>`. */
  unwitnessed: Map<string, HolderAck>;
}

export interface AckTracker {
  /** Starts counting the acks of running rotation `r` (its broadcasts published): idempotent. */
  track(key: string, r: Rotation): void;
  /** The acks of rotation `r` seen so far, by holder. */
  acks(r: Rotation): ReadonlyMap<string, HolderAck>;
  /**
   * Looks at the consumers of `r`'s holders that have not confirmed; makes again the ones that
   * vanished. Returns the broadcasts of `r` a holder stream does not hold (restored from a
   * backup taken before it, or made again empty): to be published there again.
   */
  lookup(r: Rotation): Promise<UnheldBroadcast[]>;
  /** Forgets rotation `r` (committed). */
  forget(r: Rotation): void;
  stop(): Promise<void>;
}

/**
 * `onProgress(key, remaining)` is called when an ack of the rotation of grant key `key` is
 * counted, with how many of its holders' acks are still missing (the caller acts at once on 0,
 * and now and then otherwise: a thousand acks need not be a thousand looks at the record).
 */
export function startAckTracker(opts: {
  store: Store;
  log: Logger;
  consumers: HolderConsumers;
  witnesses: ReceiptWitnesses;
  onProgress: (key: string, remaining: number) => void;
}): AckTracker {
  const { store, log, witnesses } = opts;
  const byRotation = new Map<string, Tracked>();
  // `<stream>/<consumer>` → the rotations that wait for an ack there (one per grant, a consumer is one grant's).
  const byConsumer = new Map<string, Tracked>();
  // The last ack seen on each holder consumer: one may come before the rotation it confirms is
  // tracked (a holder is quick, the record of the broadcast is written after it is published).
  const lastAck = new Map<string, HolderAck>();

  const count = (t: Tracked, id: string, ack: HolderAck) => {
    const want = t.expect.get(id);
    if (!want || ack.seq < want.seq || t.acks.has(want.holder)) return false;
    if (want.witnessed) {
      const c = witnesses.get(id);
      if (c?.rotation !== t.rotation || c.generation !== t.to) {
        // Acked, and no receipt says the part applied it (yet): counted once one does.
        t.unwitnessed.set(id, ack);
        log.debug({ rotation: t.rotation, holder: want.holder }, "an ack not counted yet: its node's receipt does not say the part applied the rotation");
        return false;
      }
      t.unwitnessed.delete(id);
    }
    t.acks.set(want.holder, ack);
    return true;
  };

  // A receipt that witnesses an ack already seen.
  witnesses.listen((id, c) => {
    const t = byConsumer.get(id);
    const holder = t?.expect.get(id)?.holder;
    if (!t || !holder || c.rotation !== t.rotation || t.acks.has(holder)) return;
    const ack = t.unwitnessed.get(id);
    if (!ack) {
      // The usual order: an agent writes its receipt before it acks.
      log.debug({ rotation: t.rotation, holder }, "a receipt says the part applied the rotation; it counts once the part's consumer has its ack");
      return;
    }
    if (count(t, id, ack)) opts.onProgress(t.key, t.expect.size - t.acks.size);
  });

  const sub = store.nc.subscribe(subjects.holderAckMetricsAll, {
    callback: (err, m) => {
      if (err) return;
      // $JS.EVENT.METRIC.CONSUMER.ACK.<stream>.<consumer>
      const t = m.subject.split(".");
      const stream = t[5];
      const consumer = t[6];
      if (!stream?.startsWith(HOLDER_STREAM_PREFIX) || !consumer) return;
      const id = `${stream}/${consumer}`;
      let metric: { stream_seq?: unknown; timestamp?: unknown };
      try {
        metric = m.json();
      } catch {
        return;
      }
      const seq = typeof metric.stream_seq === "number" ? metric.stream_seq : NaN;
      const at = typeof metric.timestamp === "string" ? Date.parse(metric.timestamp) : NaN;
      if (!Number.isFinite(seq)) return;
      const ack: HolderAck = { at: Number.isFinite(at) ? at : Date.now(), stream, consumer, seq };
      lastAck.delete(id);
      lastAck.set(id, ack);
      if (lastAck.size > LAST_ACKS_KEPT) lastAck.delete(lastAck.keys().next().value!);
      const tracked = byConsumer.get(id);
      if (tracked && count(tracked, id, ack)) opts.onProgress(tracked.key, tracked.expect.size - tracked.acks.size);
    },
  });

  /** The holders of `r` whose stream has its broadcast: what an ack counts against. */
  const endpointsOf = (r: Rotation) => broadcastTargets(r).flatMap(({ holder, endpoint, seq }) => (endpoint && seq ? [{ holder, endpoint, seq }] : []));

  const track = (key: string, r: Rotation) => {
    const cur = byRotation.get(key);
    const republished = r.republished ?? 0;
    if (cur?.rotation === r.id && cur.republished === republished) return;
    if (cur) forgetTracked(cur);
    // Part of the broadcast published again: the acks counted stand, the sequences to reach are the record's new ones.
    const same = cur?.rotation === r.id ? cur : undefined;
    const t: Tracked = {
      key,
      rotation: r.id,
      republished,
      to: r.to,
      endpoints: endpointsOf(r),
      expect: new Map(),
      acks: same?.acks ?? new Map(),
      unwitnessed: same?.unwitnessed ?? new Map(),
    };
    let early = 0;
    for (const { holder, endpoint, seq } of t.endpoints) {
      const id = `${endpoint.stream}/${endpoint.consumer}`;
      t.expect.set(id, { holder, seq, witnessed: !endpoint.sdk });
      byConsumer.set(id, t);
      const seen = lastAck.get(id);
      if (seen && count(t, id, seen)) early++;
    }
    byRotation.set(key, t);
    if (early) opts.onProgress(key, t.expect.size - t.acks.size);
  };

  const forgetTracked = (t: Tracked) => {
    byRotation.delete(t.key);
    for (const id of t.expect.keys()) if (byConsumer.get(id) === t) byConsumer.delete(id);
  };

  /**
   * The receipt of agent-held holder `holder`, read when its ack is found without it: a receipt
   * written while this process reconnected reaches the watch late, or only when it is watched
   * again, and a sweep is the time to look for what was missed.
   */
  const readWitness = async (t: Tracked, r: Rotation, id: string, holder: string, endpoint: HolderEndpoint) => {
    const c = witnesses.get(id);
    if (c?.rotation === t.rotation && c.generation === t.to) return;
    const [node, part] = holder.split("/");
    if (!node || !part) return;
    const receipt = await readJson(store.kv.receipts, keys.receipt(node, r.module, r.requirement, part), DeliveryReceipt).catch((e: unknown) => {
      log.debug({ rotation: r.id, holder, err: e }, "could not read a holder's receipt; looked at again at the next sweep");
      return undefined;
    });
    if (receipt) witnesses.noteReceipt(endpoint, receipt.value);
  };

  const lookup = async (r: Rotation): Promise<UnheldBroadcast[]> => {
    const t = byRotation.get(`${r.module}.${r.requirement}`);
    if (!t || t.rotation !== r.id) return [];
    const missing = t.endpoints.filter((x) => !t.acks.has(x.holder) && r.holders[x.holder]?.e === undefined);
    if (missing.length === 0) return [];
    const endpoints = new Map(missing.map((x) => [x.holder, x.endpoint]));
    const vanished: Array<{ holder: string; endpoint: HolderEndpoint }> = [];
    // By `<stream> <subject>`: every SDK instance of a part shares its part's broadcast. The
    // consumer's word is taken without asking the stream for the message (the rotator's identity
    // may not read a stream's messages): should a replica lag behind its stream on a cluster, the
    // cost is one more copy of the broadcast, which replaces the first (one message per subject),
    // and a holder acknowledges again what it has applied.
    const unheld = new Map<string, UnheldBroadcast>();
    let found = 0;
    for (const x of await readHolderAcks(store.jsm, r, { only: [...endpoints.keys()] })) {
      const endpoint = endpoints.get(x.holder);
      if (!endpoint || x.seq === 0) continue;
      if (x.unheld) unheld.set(broadcastKey(x.stream, endpoint.subject), { stream: x.stream, subject: endpoint.subject, seq: x.seq });
      if (x.mismatch) {
        log.warn(
          { rotation: r.id, holder: x.holder, consumer: x.consumer },
          `the consumer of holder ${x.holder} is not the one the rotator made (${x.mismatch}); its acks are not counted, and it is made again`,
        );
        await store.jsm.consumers.delete(x.stream, x.consumer).catch(() => undefined);
        vanished.push({ holder: x.holder, endpoint });
      } else if (x.vanished) vanished.push({ holder: x.holder, endpoint });
      else if (x.acked) {
        const id = `${x.stream}/${x.consumer}`;
        if (t.expect.get(id)?.witnessed) await readWitness(t, r, id, x.holder, endpoint);
        if (count(t, id, { at: Date.now(), stream: x.stream, consumer: x.consumer, seq: x.ackFloor!, found: true })) found++;
      }
    }
    if (vanished.length) {
      log.warn(
        { rotation: r.id, holders: vanished.map((x) => x.holder) },
        `rotation ${r.id}: ${vanished.length} holders' consumers had vanished; made again, they deliver the broadcast again`,
      );
      await ensureAll(opts.consumers, vanished, true);
    }
    if (found) opts.onProgress(`${r.module}.${r.requirement}`, t.expect.size - t.acks.size);
    return [...unheld.values()];
  };

  return {
    track,
    acks: (r) => {
      const t = byRotation.get(`${r.module}.${r.requirement}`);
      return t?.rotation === r.id ? t.acks : EMPTY;
    },
    lookup,
    forget: (r) => {
      const t = byRotation.get(`${r.module}.${r.requirement}`);
      if (t?.rotation === r.id) forgetTracked(t);
    },
    async stop() {
      await sub.drain().catch(() => undefined);
    },
  };
}

const EMPTY: ReadonlyMap<string, HolderAck> = new Map();
/** How many holder consumers' last acks are kept for rotations not tracked yet (a few MB at most). */
const LAST_ACKS_KEPT = 100_000;
