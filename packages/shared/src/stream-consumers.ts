/**
 * Consuming stream messages one by one, for holders of deliveries: a durable pull consumer
 * with explicit ack whose messages are handled in order per key (the node agent), and an
 * ordered, ephemeral consumer for a reader that keeps no state on the server (the SDK).
 * {@link consumeKeys} is the level-triggered form for reconcilers, built on the same consumer.
 */
import { AckPolicy, JetStreamApiError, jetstream, type ApiError, type ConsumerInfo, type JsMsg } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import type { Logger } from "./logger.js";
import { backoffMs, type Backoff } from "./backoff.js";
import { retryJetStreamGap } from "./jetstream-retry.js";
import type { Store } from "./store.js";
import type { KeyedQueue } from "./keyed-queue.js";
import { noteRevision } from "./read-floors.js";
import { kvFilter, kvStream } from "./kv-names.js";
import type { KvDurable } from "./subjects.js";

/** A running consumption; `stop()` ends it, `closed` settles when it has ended. */
export interface Consumption {
  stop(): Promise<void>;
  closed: Promise<void>;
}

/** Where a new consumer starts: every stored message, the last of each subject, or only new ones. */
export type StartAt = "all" | "last_per_subject" | "new";

/** What to do with a handled message: acknowledge it, have it redelivered later, or drop it for good. */
export type Disposition = "ack" | "retry" | "term";

/** How long a failed message stays away before it comes back: 0.5 s, doubling per delivery, at most 30 s, with jitter ({@link retryDelayMs}). */
export const REDELIVERY_BACKOFF: Backoff = { firstMs: 500, maxMs: 30_000 };

/** The wait before a failed message comes back for delivery `deliveryCount` + 1, by {@link REDELIVERY_BACKOFF}. */
export function retryDelayMs(deliveryCount: number, random?: () => number): number {
  return backoffMs(deliveryCount, REDELIVERY_BACKOFF, random);
}

/**
 * Consumes `filter` of `stream` through the durable pull consumer `durable` (created when
 * missing, starting at `startAt`, default `last_per_subject`; an existing one keeps its
 * position, so messages published while the process was away are handled when it is back).
 *
 * Messages with the same key (`keyOf`, default the subject) are handled one at a time, in the
 * order the server delivered them; different keys run concurrently. A message is acknowledged,
 * redelivered after {@link retryDelayMs} (`retry`, or when `handle` throws), or terminated
 * (`term`) as `handle` says. A message that comes back after a retry may arrive after newer
 * messages of its key, so handlers compare versions rather than trust arrival order.
 * `stop()` stops fetching and waits for the messages in work to be settled.
 */
/** Default ack wait of {@link consumeMessages}. */
export const DEFAULT_ACK_WAIT_MS = 15_000;

/**
 * How long each pull of {@link consumeMessages} waits on the server before it is made again
 * (the client's default is 30 s, with a heartbeat every half of it). A pull lives only on the
 * consumer's leader: when that leader is lost (a server killed or stopped), its successor does
 * not have it, and the client learns of it only from two heartbeats missed. With 30 s a service
 * sat idle for 30 s after its consumer's leader moved (the faults on a cluster measured the mesh
 * Ready only after 30 s, 44 s after a whole-cluster restart); with 5 s, for at most 5 s after
 * the new leader is elected. The cost: one pull request per consumption every 5 s while idle.
 */
export const CONSUME_EXPIRES_MS = 5_000;

export async function consumeMessages(opts: {
  store: Store;
  stream: string;
  durable: string;
  filter: string;
  handle: (m: JsMsg) => Promise<Disposition>;
  log: Logger;
  keyOf?: (m: JsMsg) => string;
  startAt?: StartAt;
  /**
   * How long the server waits for a message's outcome before it redelivers it; default 15 s.
   * A message in work is kept from redelivery by progress acks every third of it, so this is
   * how soon the message of a consumer that died (or froze) in work goes to another: short.
   */
  ackWaitMs?: number;
  maxAckPending?: number;
  /** Deliver subjects and headers only, not the data (for handlers that look at the subject alone). */
  headersOnly?: boolean;
  /** False: the durable is someone else's to make (a holder's, made by the control plane); it must exist. */
  create?: boolean;
}): Promise<Consumption> {
  const { store, stream, durable, filter, handle, log } = opts;
  const ackWaitMs = opts.ackWaitMs ?? DEFAULT_ACK_WAIT_MS;
  const keyOf = opts.keyOf ?? ((m: JsMsg) => m.subject);
  if (opts.create !== false)
    try {
      // Made at start-up, which may meet a JetStream gap (a reload, an election): ridden out.
      await retryJetStreamGap(() =>
        store.jsm.consumers.add(stream, {
          durable_name: durable,
          ack_policy: AckPolicy.Explicit,
          deliver_policy: opts.startAt ?? "last_per_subject",
          filter_subject: filter,
          ack_wait: ackWaitMs * 1_000_000,
          max_ack_pending: opts.maxAckPending ?? 256,
          ...(opts.headersOnly ? { headers_only: true } : {}),
        }),
      );
    } catch (e) {
      // An existing durable keeps its configuration and its position; that is the point.
      if (!(e instanceof JetStreamApiError)) throw e;
    }
  const consumer = await retryJetStreamGap(() => store.js.consumers.get(stream, durable));
  // A durable made by someone else ends the consumption when it is deleted, to be looked for again; one of its own is made again at the next start.
  const messages = await consumer.consume({
    max_messages: 64,
    expires: CONSUME_EXPIRES_MS,
    ...(opts.create === false ? { abort_on_missing_resource: true } : {}),
  });
  const tails = new Map<string, Promise<void>>();

  const settle = async (m: JsMsg): Promise<void> => {
    let d: Disposition;
    try {
      d = await handle(m);
    } catch (e) {
      log.warn({ subject: m.subject, err: e }, "handling a message failed; it comes back later");
      d = "retry";
    }
    try {
      if (d === "ack") await m.ackAck();
      else if (d === "term") m.term();
      else m.nak(retryDelayMs(m.info.deliveryCount));
    } catch (e) {
      // Not acknowledged: the server redelivers it after ack_wait, and handling is idempotent.
      log.warn({ subject: m.subject, err: e }, "could not settle a message with the server");
    }
  };

  const closed = (async () => {
    for await (const m of messages) {
      const key = keyOf(m);
      // In work from its arrival, also while it waits behind others of its key: long work (a
      // part's onRotate may take a minute) must not look like a dead consumer.
      const progress = setInterval(() => m.working(), ackWaitMs / 3);
      const next = (tails.get(key) ?? Promise.resolve()).then(() => settle(m)).finally(() => clearInterval(progress));
      tails.set(key, next);
      void next.finally(() => {
        if (tails.get(key) === next) tails.delete(key);
      });
    }
  })();

  return {
    async stop() {
      await messages.close();
      await closed.catch(() => undefined);
      while (tails.size) await Promise.allSettled([...tails.values()]);
    },
    closed,
  };
}

/** More pages than a stream's consumers could fill (256 infos each): a server that never answers an empty page is not followed for ever. */
const MAX_CONSUMER_PAGES = 10_000;

/**
 * Every consumer of `stream`, as `$JS.API.CONSUMER.LIST` pages them, asked by offset until a page
 * comes back empty. Not the client's lister: nats-server 2.9.10 in a cluster answers each page
 * with its own size as the list's `total`, so the lister stops after the first 256 consumers
 * (an agent that held more grants on a cluster never consumed the rest, and their rotations
 * stalled). Throws `JetStreamApiError` for the server's error (the stream not found, say).
 */
export async function* listConsumers(nc: NatsConnection, stream: string, timeoutMs = 5_000): AsyncGenerator<ConsumerInfo> {
  for (let offset = 0, pages = 0; pages < MAX_CONSUMER_PAGES; pages++) {
    const reply = (await nc.request(`$JS.API.CONSUMER.LIST.${stream}`, JSON.stringify({ offset }), { timeout: timeoutMs })).json<{
      consumers?: ConsumerInfo[];
      error?: ApiError;
    }>();
    if (reply.error) throw new JetStreamApiError(reply.error);
    const page = reply.consumers ?? [];
    if (page.length === 0) return;
    yield* page;
    offset += page.length;
  }
}

/** Messages of an ordered consumer; `close()` ends it. */
export type MessageStream = AsyncIterable<JsMsg> & {
  close(): Promise<void | Error>;
  closed(): Promise<void | Error>;
};

/**
 * Reads `filter` of `stream` through an ordered consumer: ephemeral, no acks, in stream order,
 * recreated by the client after a gap or a reconnect. Starts at `startAt` (default
 * `last_per_subject`: the latest message of every subject, then every new one).
 */
export async function orderedMessages(nc: NatsConnection, opts: { stream: string; filter: string; startAt?: StartAt }): Promise<MessageStream> {
  const consumer = await retryJetStreamGap(() =>
    jetstream(nc).consumers.get(opts.stream, {
      filter_subjects: opts.filter,
      deliver_policy: opts.startAt ?? "last_per_subject",
    }),
  );
  return consumer.consume();
}

/**
 * Level-triggered consumption for reconcilers (controller-runtime style): each message only
 * names a key (`keyOf` of its subject; undefined skips it), and the key goes to `queue`, which
 * collapses repeats and never works on one key twice at once; the handler reads the current
 * state itself. The message is acknowledged once its key was handled and comes back with
 * back-off when handling failed, so nothing is lost when a process dies. A durable consumer
 * shared by every instance of a service splits the work between them.
 */
export function consumeKeys(opts: {
  store: Store;
  /**
   * One of the mesh's own durables (`Durables`), whose bucket it consumes: the permissions deny
   * every one of them to the identities that do not own it, so a durable named anywhere else
   * would be one an identity that lists its bucket could take over.
   */
  durable: KvDurable;
  keyOf: (subject: string) => string | undefined;
  queue: KeyedQueue;
  log: Logger;
  /**
   * True for a change this instance made itself and has acted on already (a KV revision it
   * wrote, say): acknowledged without queueing its key. A change written by an instance that
   * died before acting on it is redelivered to another instance, for which it is not its own.
   */
  acted?: (key: string, seq: number) => boolean;
}): Promise<Consumption> {
  const { keyOf, queue, acted } = opts;
  // The store's handle of the bucket this stream is (its reads are the ones held to the floor).
  const bucket = Object.values(opts.store.kv).find((kv) => (kv as { bucketName?: () => string }).bucketName?.() === kvStream(opts.durable.bucket));
  return consumeMessages({
    ...opts,
    stream: kvStream(opts.durable.bucket),
    durable: opts.durable.name,
    filter: kvFilter(opts.durable.bucket),
    // No ordering per key here: the queue collapses and serialises keys itself.
    keyOf: (m) => String(m.seq),
    maxAckPending: 1_000,
    // Only the subject names the key: a rewritten 42 KB rotation record need not travel.
    headersOnly: true,
    handle: async (m) => {
      const key = keyOf(m.subject);
      if (key === undefined) return "ack";
      // The handler's read of the key must be at least this new (read-floors.ts).
      if (bucket) noteRevision(bucket, key, m.seq);
      if (!acted?.(key, m.seq)) await queue.enqueue(key);
      return "ack";
    },
  });
}
