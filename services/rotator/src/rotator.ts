/**
 * The rotator service: starts rotations on request (or on a requirement's schedule), carries
 * each through its persisted states, and commits only when every holder confirmed. The state
 * machine is driven here; its parts are their own files: staging.ts (k+1 beside k),
 * broadcast.ts (one message per holder stream), ack-tracker.ts and holder-consumers.ts (the
 * holders' consumers, and who acknowledged on them), commit.ts (retire, release, history),
 * schedule.ts and handover.ts (what starts a rotation by itself), rotation-machine.ts (the
 * pure rules and the table of moves). A rotation's state is its record in KV (compare-and-set)
 * and the holders' acks in JetStream, so several instances share the work and a fresh instance
 * finishes what a crashed one left.
 */
import type { Span } from "@opentelemetry/api";
import {
  AuditedRequests,
  broadcastKey,
  operatorRequestSubjects,
  requesterName,
  Durables,
  Buckets,
  ErrorCodes,
  isMeshError,
  KeyedQueue,
  MeshError,
  QueueGroups,
  RotateRequest,
  EvictRequest,
  type Rotation,
  RotationStates,
  isRotationRunning,
  keys,
  kvKeyOf,
  parseGrantId,
  parseHolderId,
  subjects,
  type RotateReply,
  type RotationState,
} from "@mesh/shared";
import { AuditLog, consumeKeys, isCasConflict, recordRotation, storeReplicas, serveJson, tracer } from "@mesh/shared/runtime";
import type { RotatorOptions, RotatorTestHooks } from "./rotator-options.js";
import {
  ackLookupDue,
  confirmedCount,
  enter,
  evictHolders,
  nameHolders,
  nextStep,
  withAcks,
  withRepublished,
  withRotatingCondition,
} from "./rotation-machine.js";
import { contextOfTraceparent } from "./trace-context.js";
import { startSchedule } from "./schedule.js";
import { startHandovers } from "./handover.js";
import { watchHolderRegistry } from "./holder-registry.js";
import { rotatorContext } from "./rotator-context.js";
import { staging } from "./staging.js";
import { broadcaster } from "./broadcast.js";
import { committer } from "./commit.js";
import { holderConsumers, onRegistration } from "./holder-consumers.js";
import { startAckTracker, type UnheldBroadcast } from "./ack-tracker.js";
import { ReceiptWitnesses } from "./receipt-witnesses.js";
import { carrier } from "./carry-over.js";

/** A running rotator. */
export interface Rotator {
  /** Starts a rotation of `grant` (`<module>/<requirement>`), as a request on `mesh.api.rotate` would. */
  rotate(req: RotateRequest): Promise<Rotation>;
  /** Works on the rotation of a grant key (`<module>.<requirement>`) now. */
  advance(key: string): Promise<void>;
  stop(): Promise<void>;
}

/**
 * Starts the rotator: serves `mesh.api.rotate`, follows rotation records, and consumes
 * confirmations. Picks up every running rotation at once (a crashed instance's too).
 */
export async function startRotator(opts: RotatorOptions, testHooks: RotatorTestHooks = {}): Promise<Rotator> {
  const ctx = rotatorContext(opts, testHooks);
  const { store, log, records, holdIfPaused, transition, setGrant, adapters } = ctx;
  // Rotations whose grant already says Rotating/AwaitingHolders, set by this instance beside the broadcast.
  const marked = new Set<string>();
  const spans = new Map<string, Span>();
  const timers = new Map<string, NodeJS.Timeout>();
  // Holders' streams and consumers, made by the control plane (a holder may make none).
  // Holder streams and their consumers at the store's replicas (R3 on a cluster, on file; one server: in memory; holder-streams.ts).
  const witnesses = new ReceiptWitnesses();
  const consumers = holderConsumers({ store, log, replicas: opts.replicas ?? storeReplicas(store.nc.info), witnesses });
  const registry = await watchHolderRegistry({ store, log, onChange: (k, reg) => onRegistration(consumers, log, k, reg) });
  // The last ack in: the commit, now. Before that, a look now and then (the count in the record; holders the operator evicted).
  const looks = new Map<string, NodeJS.Timeout>();
  const acks = startAckTracker({
    store,
    log,
    consumers,
    witnesses,
    onProgress: (key, remaining) => {
      if (remaining === 0) {
        clearTimeout(looks.get(key));
        looks.delete(key);
        void queue.enqueue(key).catch(() => undefined);
      } else if (!looks.has(key)) {
        const t = setTimeout(() => {
          looks.delete(key);
          if (!stopped) void queue.enqueue(key).catch(() => undefined);
        }, COUNT_WRITE_MS);
        t.unref();
        looks.set(key, t);
      }
    },
  });
  let stopped = false;
  const { rotate } = staging(ctx, { registry, spans, enqueue: (key) => void queue.enqueue(key).catch(() => undefined) });
  const broadcast = broadcaster(ctx, consumers);
  const { commit } = committer(ctx);
  const { carry } = carrier(ctx, {
    onCopied: async () => {
      if (!testHooks.pauseInCarry) return;
      ctx.freeze("in the middle of a handover's copy");
      testHooks.onPauseInCarry?.();
      await holdIfPaused();
    },
  });
  /**
   * Sets the grant's Rotating condition for `r` awaiting its holders, before the record says so:
   * from the broadcast step, beside the publishes, while the record is still `Staged`.
   */
  const markRotating = async (key: string, r: Rotation, now: Date) => {
    const next: Rotation = { ...r, state: RotationStates.AwaitingHolders };
    await setGrant(key, (g) => {
      const conditions = withRotatingCondition(g.conditions, next, now);
      return conditions === g.conditions ? undefined : { ...g, conditions };
    });
    if (marked.size >= 1_000) marked.clear();
    marked.add(r.id);
  };

  const endSpan = (r: Rotation, outcome: string) => {
    let span = spans.get(r.id);
    spans.delete(r.id);
    // Another instance started it: this instance's part joins the same trace.
    span ??= tracer("rotator").startSpan("rotate.resume", { attributes: { "mesh.rotation": r.id } }, contextOfTraceparent(r.traceparent));
    span.setAttribute("mesh.outcome", outcome);
    span.end();
  };

  const schedule = (key: string, atMs: number) => {
    clearTimeout(timers.get(key));
    const t = setTimeout(
      () => {
        timers.delete(key);
        if (!stopped) void queue.enqueue(key).catch(() => undefined);
      },
      Math.max(0, atMs - Date.now()) + 10,
    );
    t.unref();
    timers.set(key, t);
  };

  /** When this instance last wrote each running rotation's count of confirmations. */
  const countedAt = new Map<string, number>();

  /**
   * Writes the count of `view`'s confirmations into its record, at most once a second: for
   * `meshctl status` and `rotate --wait`; who confirmed is JetStream's record, not this one.
   */
  const writeCount = async (key: string, view: Rotation) => {
    const n = confirmedCount(view);
    if (n === view.confirmed || Date.now() - (countedAt.get(key) ?? 0) < COUNT_WRITE_MS) return;
    countedAt.set(key, Date.now());
    await records
      .update(key, (x) => (x && x.id === view.id && isRotationRunning(x) && x.confirmed !== n ? { ...x, confirmed: n } : undefined))
      .catch(() => undefined);
  };

  const advance = async (key: string): Promise<void> => {
    for (let guard = 0; guard < 10 && !stopped; guard++) {
      await holdIfPaused();
      const r = (await records.read(key))?.value;
      if (!r || !isRotationRunning(r)) return;
      if (r.state !== RotationStates.Staged) acks.track(key, r);
      // The record with the confirmations JetStream has: what every step decides on.
      const view = withAcks(r, acks.acks(r));
      const now = new Date();
      const step = nextStep(view, now);
      const rlog = log.child({ rotation: r.id, state: r.state });
      try {
        switch (step.action) {
          case "broadcast": {
            // A handover of a registry grant: what k stored is carried over first, so no holder told of k+1 misses it.
            const carried = await carry(r);
            // The grant's Rotating condition is written beside the broadcast, off the path to the
            // commit; should that fail, the next step writes it.
            const [broadcasts, rotating] = await Promise.all([
              broadcast(r),
              markRotating(key, r, now).then(
                () => true,
                (e: unknown) => {
                  log.warn(
                    { rotation: r.id, err: e },
                    `rotation ${r.id}: could not set the grant's Rotating condition beside the broadcast; the next step sets it`,
                  );
                  return false;
                },
              ),
            ]);
            // With the condition written, the record goes on to AwaitingHolders in the same write:
            // one write fewer before the holders' acks count, three on a cluster's replicas. A
            // rotator the test hook freezes in Broadcast writes that state alone, as it does
            // when the condition could not be written.
            const states = rotating && testHooks.pauseAfter !== RotationStates.Broadcast ? BROADCAST_AND_AWAITING : RotationStates.Broadcast;
            // The copy's outcome replaces its progress.
            const next = await transition(key, r, states, now, () => true, {
              broadcasts,
              ...(carried ? { carried, carrying: undefined } : {}),
            });
            if (next) acks.track(key, next);
            continue;
          }
          case "await": {
            if (!marked.has(r.id)) await markRotating(key, r, now);
            await transition(key, r, RotationStates.AwaitingHolders, now);
            continue;
          }
          case "stall": {
            const next = enter(view, RotationStates.Stalled, now);
            await setGrant(key, (g) => ({ ...g, conditions: withRotatingCondition(g.conditions, next, now) }));
            // Who is missing, as JetStream has it, is written once, with the state.
            if (!(await transition(key, r, RotationStates.Stalled, now, () => true, { holders: view.holders, confirmed: confirmedCount(view) }))) continue;
            // Counted by the instance whose write took: once across instances.
            recordRotation(r.kind, "stalled", (now.getTime() - Date.parse(r.requestedAt)) / 1000);
            rlog.warn(
              { missing: step.missing },
              `rotation ${r.id} stalled: ${step.missing.length} holders have not confirmed (${nameHolders(step.missing)}); generation ${r.from} is kept`,
            );
            return;
          }
          case "commit": {
            await commit(key, view);
            // The one write of who confirmed, and where: the record keeps it once JetStream's consumers are gone.
            const next = await transition(key, r, RotationStates.Committed, now, () => true, { holders: view.holders, confirmed: confirmedCount(view) });
            if (!next) continue;
            recordRotation(r.kind, "committed", (now.getTime() - Date.parse(r.requestedAt)) / 1000);
            marked.delete(r.id);
            countedAt.delete(key);
            acks.forget(r);
            endSpan(next, "committed");
            clearTimeout(timers.get(key));
            timers.delete(key);
            return;
          }
          case "wait":
            schedule(key, step.untilMs);
            await writeCount(key, view);
            return;
          default:
            await writeCount(key, view);
            return;
        }
      } catch (e) {
        if (isCasConflict(e)) continue; // someone else moved it: look again
        if (isMeshError(e, ErrorCodes.StreamsLost)) {
          // Said on the record, where meshctl rotate --wait and trace read it; tried again all the same.
          const wrote = await records
            .update(key, (x) =>
              x && x.id === r.id && isRotationRunning(x) && x.blocked?.message !== e.message
                ? { ...x, blocked: { reason: "StreamsLost", message: e.message, at: new Date().toISOString() } }
                : undefined,
            )
            .catch(() => undefined);
          if (wrote?.wrote) rlog.error(`rotation ${r.id} cannot go on: ${e.message}`);
        }
        rlog.warn({ err: e }, "rotation step failed; it is retried");
        throw e;
      }
    }
  };

  const queue = new KeyedQueue(advance, 16);

  /**
   * Publishes `r`'s broadcast again into the holder streams that do not hold it (`unheld`): a
   * stream restored from a backup taken before the broadcast, or made again empty, has nothing
   * for its holders to confirm, and the rotation would wait for them until it stalls. The
   * record then names the new sequences there; the acks counted so far stand.
   */
  const republish = async (key: string, r: Rotation, unheld: readonly UnheldBroadcast[]) => {
    const again = await broadcast(r, { only: new Set(unheld.map((b) => broadcastKey(b.stream, b.subject))), round: (r.republished ?? 0) + 1 });
    await records.update(key, (x) => (x && x.id === r.id && isRotationRunning(x) ? withRepublished(x, again) : undefined));
    log.warn(
      { rotation: r.id, streams: unheld.map((b) => b.stream) },
      `rotation ${r.id}: ${unheld.length} holder streams did not hold its broadcast (restored from a backup taken before it, or made again empty); published there again`,
    );
  };

  const sweep = async () => {
    try {
      // Through the decoded records: a running rotation's record is large and mostly unchanged between sweeps.
      for await (const key of await store.kv.rotations.keys()) {
        const r = (await records.read(key))?.value;
        if (!isRotationRunning(r)) continue;
        // Acks whose metric was lost, or came before this instance ran; consumers that vanished are made again.
        if (r.state !== RotationStates.Staged) {
          acks.track(key, r);
          if (ackLookupDue(r, new Date())) {
            const unheld = await acks.lookup(r).catch((e: unknown) => {
              log.debug({ rotation: r.id, err: e }, "could not look at the holders' consumers");
              return [];
            });
            if (unheld.length)
              await republish(key, r, unheld).catch((e: unknown) =>
                log.warn({ rotation: r.id, err: e }, "could not publish a broadcast again; tried again at the next sweep"),
              );
          }
        }
        void queue.enqueue(key).catch(() => undefined);
      }
    } catch (e) {
      log.warn({ err: e }, "could not list rotations");
    }
  };

  // Every rotate, revoke and evict is in the audit trail before it is answered.
  const trail = new AuditLog(store.nc, "rotator");
  const api = serveJson(
    store.nc,
    operatorRequestSubjects(subjects.rotate),
    QueueGroups.rotator,
    log,
    async (body, m): Promise<RotateReply> => {
      const parsed = RotateRequest.safeParse(body);
      if (!parsed.success) {
        throw new MeshError(
          ErrorCodes.InvalidRequest,
          `not a rotate request: ${parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}`,
        );
      }
      // Who revoked is whom the subject names; what the body says is kept beside it, as what the sender calls itself.
      const req = parsed.data;
      const by = req.revoke && (req.revoke.by ? `${requesterName(m.requester)} (${req.revoke.by})` : requesterName(m.requester));
      return { ok: true, rotation: await rotate(req.revoke ? { ...req, revoke: { ...req.revoke, by: by!.slice(0, 200) } } : req) };
    },
    { audit: { log: trail, request: AuditedRequests.rotate } },
  );

  // Holders that never came back: the operator commits without them (meshctl rotate --evict).
  const evictApi = serveJson(store.nc, operatorRequestSubjects(subjects.evict), QueueGroups.rotator, log, async (body): Promise<RotateReply> => {
    const parsed = EvictRequest.safeParse(body);
    if (!parsed.success)
      throw new MeshError(ErrorCodes.InvalidRequest, `not an evict request: ${parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}`);
    const req = parsed.data;
    const id = parseGrantId(req.grant);
    if (!id) throw new MeshError(ErrorCodes.InvalidRequest, `${JSON.stringify(req.grant)} is not a grant id (<module>/<requirement>)`);
    const key = keys.grant(id.module, id.requirement);
    let outcome: ReturnType<typeof evictHolders> | undefined;
    const { record } = await records.update(key, (r) => {
      outcome = undefined;
      if (!isRotationRunning(r)) return undefined;
      outcome = evictHolders(r, req.holders, new Date());
      return outcome.evicted.length ? outcome.rotation : undefined;
    });
    const r = record?.value;
    if (!isRotationRunning(r) || !outcome)
      throw new MeshError(ErrorCodes.NotFound, `no rotation of ${req.grant} is running: --evict commits a running or Stalled one without the holders named`);
    if (outcome.unknown.length) {
      throw new MeshError(
        ErrorCodes.InvalidRequest,
        `rotation ${r.id} has no holder ${outcome.unknown.join(", ")}; its holders are ${Object.keys(r.holders).sort().join(", ")}`,
      );
    }
    for (const h of outcome.evicted) {
      log.warn({ rotation: r.id, holder: h }, `rotation ${r.id}: holder ${h} evicted by the operator; the rotation goes on without it`);
      // An SDK instance leaves the holders: later rotations do not wait for it until it registers again.
      const holder = parseHolderId(h);
      if (holder?.instance)
        await store.kv.holders.delete(keys.holder(r.module, r.requirement, holder.node, holder.part, holder.instance)).catch(() => undefined);
    }
    void queue.enqueue(key).catch(() => undefined);
    return { ok: true, rotation: r };
  });

  const changes = await consumeKeys({
    store,
    durable: Durables.rotator,
    keyOf: kvKeyOf(Buckets.rotations),
    queue,
    log,
    // A state this instance wrote, it moves on from itself: without the read of the whole record each of its writes would cost.
    acted: (key, revision) => records.wroteRevision(key, revision),
  });
  const sweeper = setInterval(() => void sweep(), opts.sweepMs ?? 5_000);
  sweeper.unref();
  await sweep();
  const scheduler = startSchedule({ store, log, checkMs: opts.scheduleCheckMs ?? 60_000, rotate });
  const handovers = await startHandovers({ store, log, rotate });
  log.info("rotator started");

  return {
    rotate,
    advance: (key) => queue.enqueue(key),
    async stop() {
      stopped = true;
      clearInterval(sweeper);
      scheduler.stop();
      await handovers.stop();
      for (const t of timers.values()) clearTimeout(t);
      for (const t of looks.values()) clearTimeout(t);
      await Promise.all([api.stop(), evictApi.stop()]);
      await changes.stop();
      await acks.stop();
      await registry.stop();
      await consumers.stop();
      await adapters.close();
    },
  };
}

/** The broadcast step's states, entered in one write once the grant says the rotation awaits its holders. */
const BROADCAST_AND_AWAITING = [RotationStates.Broadcast, RotationStates.AwaitingHolders] as const;

/** At most how often a running rotation's count of confirmations is written into its record. */
const COUNT_WRITE_MS = 1_000;

export type { RotationState };
