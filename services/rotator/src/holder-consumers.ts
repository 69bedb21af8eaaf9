/**
 * The holders' streams and consumers (holder-streams.ts in @mesh/shared), made and removed by
 * the control plane, never by a holder: an SDK instance's consumer when its registration
 * appears in `mesh-holders` (gone with it), a node agent's for a part when its receipt says it
 * holds the grant (gone when it says the binding was withdrawn), and every holder's again before
 * a rotation's broadcast, so that one lost with its server is there to be delivered to.
 * Creating is idempotent on the server (the same configuration again is a no-op), and what was
 * made is remembered, so a registration's heartbeat costs nothing.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { JetStreamApiError } from "@nats-io/jetstream";
import pLimit from "p-limit";
import {
  Buckets,
  DeliveryReceipt,
  backoffMs,
  type HolderRegistration,
  grantId,
  holderConsumerConfig,
  holderEndpoint,
  holderKey,
  holderStreamConfig,
  parseReceiptKey,
  subjects,
  type HolderEndpoint,
} from "@mesh/shared";
import { listConsumers, retryJetStreamGap, watchedJson, type Store } from "@mesh/shared/runtime";
import type { Logger } from "@mesh/shared/service";
import type { ReceiptWitnesses } from "./receipt-witnesses.js";

export interface HolderConsumers {
  /** Makes the stream and consumer of `endpoint` if this instance has not made them yet (or `force`: it may have vanished). */
  ensure(endpoint: HolderEndpoint, force?: boolean): Promise<void>;
  /** Removes the consumer of holder `holder` of grant `grant` (a registration or binding gone); missing is fine. */
  remove(grant: string, holder: string): Promise<void>;
  stop(): Promise<void>;
}

/**
 * How many consumers one rotator instance makes or removes at once, whatever asks
 * (registrations, receipts, the check before a broadcast): each is one JetStream API request,
 * and on a cluster a Raft group the meta leader places or removes. A thousand holders stopping
 * together sent a thousand deletes at once, and the meta leader answered most of them after the
 * client had given up.
 */
const CREATE_CONCURRENCY = 64;

/**
 * How often the holder streams' consumers are looked at for a replica stuck behind, and how many
 * looks in a row it must be behind before its consumer's leader is asked to step down. On
 * nats-server 2.9.10 a file-backed consumer replica whose server was killed while it led the
 * consumer may come back stuck catching up, forever; one more server lost would then leave the
 * consumer without a majority, and a rotation waiting for that holder's ack. A new leader catches
 * the replica up, at the cost of one election. Not stuck: a replica whose lag fell since the last
 * look, one of a server that is down, and any of a consumer younger than
 * {@link REPLICA_MIN_AGE_MS} (a cluster making many consumers has most replicas behind for a
 * while). At most {@link REPLICA_STEPDOWNS_PER_LOOK} leaders are asked per look. The figures
 * these numbers come from: docs/design.md, "Holder consumers on a cluster".
 */
export const REPLICA_LOOK_MS = 10_000;
export const REPLICA_LOOKS_BEHIND = 3;
export const REPLICA_MIN_AGE_MS = 30_000;
export const REPLICA_STEPDOWNS_PER_LOOK = 8;
/** How the watch of receipts is started again after it ends; a watch that ran this long starts from the first wait again. */
const WATCH_BACKOFF = { firstMs: 250, maxMs: 10_000 };
const WATCH_HEALTHY_MS = 60_000;

export function holderConsumers(opts: { store: Store; log: Logger; replicas: number; witnesses: ReceiptWitnesses }): HolderConsumers {
  const { store, log } = opts;
  const streams = new Map<string, Promise<void>>();
  const consumers = new Map<string, Promise<void>>();
  const creating = pLimit(CREATE_CONCURRENCY);
  let stopping = false;

  const makeStream = (e: HolderEndpoint) => {
    let p = streams.get(e.stream);
    if (!p) {
      p = retryJetStreamGap(async () => {
        try {
          await store.jsm.streams.add(holderStreamConfig(e, opts.replicas));
        } catch (err) {
          // Made already by another instance (or before a restart) with the same subjects: that is the one.
          if (!(err instanceof JetStreamApiError) || !/already in use/i.test(err.message)) throw err;
        }
      });
      streams.set(e.stream, p);
      p.catch(() => streams.delete(e.stream));
    }
    return p;
  };

  const ensure = async (e: HolderEndpoint, force = false) => {
    const id = `${e.stream}/${e.consumer}`;
    if (force) {
      consumers.delete(id);
      streams.delete(e.stream);
    }
    let p = consumers.get(id);
    if (!p) {
      p = (async () => {
        await makeStream(e);
        await creating(() => retryJetStreamGap(() => store.jsm.consumers.add(e.stream, holderConsumerConfig(e, opts.replicas))));
      })();
      consumers.set(id, p);
      p.catch(() => consumers.delete(id));
    }
    return p;
  };

  const remove = async (grant: string, holder: string) => {
    const e = holderEndpoint(grant, holder);
    if (!e) return;
    consumers.delete(`${e.stream}/${e.consumer}`);
    try {
      await creating(() => store.jsm.consumers.delete(e.stream, e.consumer));
      log.debug({ grant, holder, stream: e.stream, consumer: e.consumer }, "holder's consumer removed");
    } catch (err) {
      // Stopping: removals still queued end with the connection. An SDK instance's consumer goes by itself once idle (SDK_CONSUMER_INACTIVE_MS).
      if (stopping) return;
      if (!(err instanceof JetStreamApiError) || !/not found/i.test(err.message))
        log.warn({ grant, holder, err }, "could not remove a holder's consumer; the next registration change tries again");
    }
  };

  // Replicas stuck behind (see REPLICA_LOOK_MS): one listing per holder stream this instance made consumers on.
  /** Per consumer: looks in a row with a replica behind and not catching up, and each lagging replica's lag at the last one. */
  const behind = new Map<string, { looks: number; lags: Map<string, number> }>();
  const lookAtReplicas = async () => {
    const streamNames = new Set([...consumers.keys()].map((id) => id.slice(0, id.indexOf("/"))));
    let asked = 0;
    for (const stream of streamNames) {
      try {
        for await (const ci of listConsumers(store.nc, stream)) {
          const id = `${stream}/${ci.name}`;
          const lagging = (ci.cluster?.replicas ?? []).filter((r) => !r.current && !r.offline);
          const young = Date.now() - Date.parse(ci.created) < REPLICA_MIN_AGE_MS;
          if (!ci.cluster?.leader || lagging.length === 0 || young) {
            behind.delete(id);
            continue;
          }
          const lags = new Map(lagging.map((r) => [r.name, r.lag ?? 0]));
          const prev = behind.get(id);
          // Catching up (a lag fell since the last look): not stuck, counted afresh.
          const catchingUp = prev !== undefined && [...lags].some(([name, lag]) => lag < (prev.lags.get(name) ?? Infinity));
          const looks = prev && !catchingUp ? prev.looks + 1 : 1;
          behind.set(id, { looks, lags });
          if (looks < REPLICA_LOOKS_BEHIND || asked >= REPLICA_STEPDOWNS_PER_LOOK) continue;
          behind.delete(id);
          asked++;
          const reply = (await store.nc.request(subjects.consumerLeaderStepdown(stream, ci.name), "", { timeout: 5_000 })).json<{
            error?: { description?: string };
          }>();
          if (reply.error) {
            // Most often another rotator asked a moment before, and the consumer is electing its new leader.
            log.debug({ stream, consumer: ci.name, error: reply.error.description }, "a holder consumer's leader did not step down; looked at again later");
            continue;
          }
          log.info(
            { stream, consumer: ci.name, leader: ci.cluster?.leader, lagging: lagging.map((r) => r.name) },
            "a holder consumer's replica stayed behind its leader; its leader was asked to step down, so that a new one catches it up",
          );
        }
      } catch (err) {
        log.warn({ stream, err }, "could not look at (or repair) the replicas of a holder stream's consumers; looked at again later");
      }
    }
  };
  let looking: Promise<void> | undefined;
  const replicaTimer =
    opts.replicas > 1
      ? setInterval(() => {
          looking ??= lookAtReplicas().finally(() => (looking = undefined));
        }, REPLICA_LOOK_MS)
      : undefined;
  replicaTimer?.unref();

  // Agents: a receipt says the part holds the grant (or no longer does). A watch that ends (its
  // consumer lost while this process reconnected, with a new identity of its own or to another
  // server) is started again, and replays every receipt: the tracker's witnesses are never left
  // to go stale.
  let receiptsWatch: Awaited<ReturnType<typeof store.kv.receipts.watch>> | undefined;
  const stopWaiting = new AbortController();
  const watchReceipts = async () => {
    receiptsWatch = await store.kv.receipts.watch();
    if (stopping) receiptsWatch.stop();
    for await (const ev of receiptsWatch) {
      const k = parseReceiptKey(ev.key);
      if (!k) continue;
      const grant = grantId(k.module, k.requirement);
      const holder = holderKey(k.node, k.part);
      const r =
        ev.operation === "PUT" && ev.length
          ? DeliveryReceipt.safeParse(watchedJson(ev, (err) => log.warn({ err }, "a delivery receipt is left out")))
          : undefined;
      const e = holderEndpoint(grant, holder);
      // What the part applied, as its agent says: the ack tracker's second witness.
      if (e) opts.witnesses.noteReceipt(e, r?.success ? r.data : undefined);
      if (!r?.success || r.data.withdrawnAt || r.data.generation === 0) {
        if (!r?.success || r.data.withdrawnAt) void remove(grant, holder);
        continue;
      }
      if (e)
        ensure(e).catch((err: unknown) => log.warn({ grant, holder, err }, "could not make the agent's consumer; it is made again before the next rotation"));
    }
  };
  const watching = (async () => {
    for (let attempt = 1; !stopping; attempt++) {
      const started = Date.now();
      try {
        await watchReceipts();
        if (stopping) return;
        log.warn({ bucket: Buckets.receipts }, "the watch of delivery receipts ended; watching again");
      } catch (e) {
        if (stopping) return;
        log.warn({ err: e, bucket: Buckets.receipts }, "the watch of delivery receipts failed; watching again");
      }
      if (Date.now() - started > WATCH_HEALTHY_MS) attempt = 1;
      await sleep(backoffMs(attempt, WATCH_BACKOFF), undefined, { signal: stopWaiting.signal }).catch(() => undefined);
    }
  })();

  return {
    ensure,
    remove,
    async stop() {
      stopping = true;
      stopWaiting.abort();
      clearInterval(replicaTimer);
      receiptsWatch?.stop();
      await watching;
      await looking;
    },
  };
}

/** The SDK registration change `reg` (undefined: deleted) applied to the consumers: made for a registration, removed with it. */
export function onRegistration(c: HolderConsumers, log: Logger, key: string, reg: HolderRegistration | undefined): void {
  if (!reg) {
    // key: <module>.<requirement>.<node>.<part>.<instance>
    const [module, requirement, node, part, instance] = key.split(".");
    if (module && requirement && node && part && instance) void c.remove(grantId(module, requirement), `${node}/${part}/${instance}`);
    return;
  }
  const e = holderEndpoint(reg.grant, reg.holder);
  if (e)
    c.ensure(e).catch((err: unknown) =>
      log.warn({ holder: reg.holder, err }, "could not make the SDK holder's consumer; it is made again before the next rotation"),
    );
}

/** Ensures every endpoint, {@link CREATE_CONCURRENCY} at a time; the holders whose consumer could not be made, with why. */
export async function ensureAll(
  c: HolderConsumers,
  endpoints: ReadonlyArray<{ holder: string; endpoint: HolderEndpoint }>,
  force = false,
): Promise<Array<{ holder: string; error: unknown }>> {
  const failed: Array<{ holder: string; error: unknown }> = [];
  let i = 0;
  const worker = async () => {
    while (i < endpoints.length) {
      const x = endpoints[i++]!;
      await c.ensure(x.endpoint, force).catch((error: unknown) => failed.push({ holder: x.holder, error }));
    }
  };
  await Promise.all(Array.from({ length: Math.min(CREATE_CONCURRENCY, endpoints.length) }, worker));
  return failed;
}
