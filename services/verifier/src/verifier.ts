/**
 * The verifier service: re-checks every grant on a schedule (each before its deadline, its last
 * check plus its interval, by the time checks take now, where the other checks leave room:
 * schedule.ts) and on events (the grant changed: provisioned, delivered, a new generation; an agent's probe
 * came in; `meshctl verify` asked), records the outcome in KV `mesh-verifications`, sets the
 * grant's `Verified` condition when it changes, and repairs drift by policy.
 *
 * Several instances may run and split the grants between them: each joins the verifiers'
 * membership (KV `mesh-instances`, membership.ts) and checks on its schedule and on grant
 * changes only the grants it owns by rendezvous hashing over the live instances, so two
 * verifiers check twice as many grants per interval and none twice. When an instance joins or
 * leaves, the grants that move to another are checked there when their record says they are
 * due (a check younger than 80 % of the interval, of the same basis, is not repeated), so a
 * handover checks nothing twice either. Probe reports and verify requests go to one instance
 * through a queue group; records and grants are written with compare-and-set. Within
 * one instance, scheduled and event-driven work on a grant never overlaps; a forced check
 * (`meshctl verify`) has its own queue so it is answered promptly, and may run beside one —
 * both converge, since every write is compare-and-set and a repair is idempotent.
 */
import { hostname } from "node:os";
import {
  AuditedRequests,
  operatorRequestSubjects,
  Buckets,
  ErrorCodes,
  KeyedQueue,
  MeshError,
  ProbeReport,
  QueueGroups,
  VerifyRequest,
  errorMessage,
  getCondition,
  keys,
  parseGrantId,
  subjects,
  type VerifyReply,
} from "@mesh/shared";
import { AuditLog, joinMembership, serveJson, watchedJson, type Membership } from "@mesh/shared/runtime";
import { AdapterPool, CredentialStore, keysOf } from "@mesh/providers";
import type { CheckDeps } from "./check.js";
import { CheckScheduler } from "./check-scheduler.js";
import { reportedGrantKey } from "./probes.js";
import { mergeRun, type RunRequest, type RunWant } from "./run-request.js";
import { runGrant, type RunContext, type VerifierStats, type VerifyOutcome } from "./run.js";
import { globalInterval } from "./schedule.js";
import { startStoreGauges } from "./store-gauges.js";
import type { VerifierOptions } from "./verifier-options.js";

/** A running verifier. */
export interface Verifier {
  /** This instance's name. */
  readonly instance: string;
  /** Checks `<module>.<requirement>` now (asking its holders' agents to probe too); with `repair`, repairs once whatever the policy. */
  verify(key: string, opts?: { repair?: boolean }): Promise<VerifyOutcome>;
  stats(): VerifierStats;
  /** Stops scheduling and serving, waits for the runs in work. Idempotent. */
  stop(): Promise<void>;
  /**
   * Rejects when the verifier can no longer do its part while it runs: its watch of the grants
   * or of the verifiers' membership ended before {@link stop}. Its service then exits to be
   * started again. Never resolves.
   */
  readonly closed: Promise<never>;
}

/** Starts a verifier; see the file's doc comment. */
export async function startVerifier(opts: VerifierOptions): Promise<Verifier> {
  const { store, log } = opts;
  const env = opts.env ?? process.env;
  const defaultInterval = opts.intervalMs ?? globalInterval(env);
  const instance = opts.instance ?? `verifier@${hostname()}/${process.pid}`;
  const random = opts.random ?? Math.random;
  const deps: CheckDeps = {
    store,
    credentials: new CredentialStore(store.kv.credentials, opts.masterKey),
    adapters: new AdapterPool(env, keysOf(opts.masterKey).kek),
    env,
  };
  const stats: RunContext["stats"] = { checks: 0, skipped: 0, repairs: 0, probes: 0, transitions: 0, errors: 0, late: 0 };

  /** Which grants this instance checks on its schedule; joined before the grants are watched (undefined: it could not join, and checks them all). */
  let membership: Membership | undefined;
  const owns = (key: string) => membership?.owns(key) ?? true;
  const pending = new Map<string, RunRequest>();
  const outcomes = new Map<string, VerifyOutcome>();
  const inflight = new Set<Promise<void>>();
  let stopped = false;

  /** Keeps `run` among the runs in work until it settles, so that stop() waits for it. */
  const track = (run: Promise<void>) => {
    const tracked = run.catch(() => undefined);
    inflight.add(tracked);
    void tracked.finally(() => inflight.delete(tracked));
    return run;
  };

  const scheduler = new CheckScheduler(defaultInterval, log, stats, (key, dueAt) => {
    // Another instance owns it now: it is scheduled there (and here again if it comes back, see onChange).
    if (!owns(key)) return;
    request(key, { mode: "scheduled", dueAt }).catch((e: unknown) => {
      stats.errors++;
      log.warn({ key, err: e }, "scheduled verification failed; retrying");
      scheduler.after(key, Math.min(defaultInterval, 5_000));
    });
  });
  const ctx: RunContext = {
    store,
    deps,
    log,
    instance,
    defaultIntervalMs: defaultInterval,
    probeTimeoutMs: opts.probeTimeoutMs ?? 3_000,
    random,
    stats,
    scheduler,
    owns,
  };

  const queue = new KeyedQueue(async (key) => {
    const p = pending.get(key) ?? mergeRun(undefined, { mode: "event" });
    pending.delete(key);
    const o = await runGrant(ctx, key, p);
    if (!o.grant) outcomes.delete(key);
  }, opts.concurrency ?? 16);

  // Forced checks (meshctl verify) have their own small queue, so that an answer does not wait
  // behind a backlog of scheduled checks when the verifier is saturated.
  const forcedRepair = new Map<string, boolean>();
  const forcedQueue = new KeyedQueue(async (key) => {
    const repair = forcedRepair.get(key) ?? false;
    forcedRepair.delete(key);
    outcomes.set(key, await runGrant(ctx, key, { mode: "forced", repair, probes: [] }));
  }, 4);

  /** Asks for a run of `key`; requests made before the run starts are merged into it. */
  const request = (key: string, want: RunWant): Promise<void> => {
    if (stopped) return Promise.resolve();
    pending.set(key, mergeRun(pending.get(key), want));
    return track(queue.enqueue(key));
  };

  // The grants this instance knows of (from the watch below), so that when the membership
  // changes it schedules those it gained. A grant it gained is checked when its record says it
  // is due: the instance that had it checked it within the interval, which is not repeated.
  const known = new Set<string>();
  // Set once the store's gauges exist (below), which need the membership made first.
  let gaugesMembershipChanged = () => {};
  const spread = () => Math.round(random() * Math.min(defaultInterval, 2_000));
  try {
    membership = await joinMembership({
      kv: store.kv.instances,
      service: "verifier",
      instance,
      log,
      onChange: () => {
        for (const key of known) if (!scheduler.has(key) && owns(key)) scheduler.after(key, spread());
        gaugesMembershipChanged();
      },
    });
  } catch (e) {
    // An identity issued before the membership existed may not write it: verifying every
    // grant beats verifying none, and the log says what to change.
    log.error(
      { err: errorMessage(e) },
      `could not join the verifiers' membership in KV ${Buckets.instances} (${errorMessage(e)}): this verifier checks every grant, as if it were the only one; beside other verifiers grants are then checked more than once. Give its identity the right to write ${Buckets.instances}.verifier.> (meshctl bootstrap issues it) and restart it`,
    );
  }

  // The store's gauges: reported by the verifier that owns them in the membership.
  const gauges = startStoreGauges({ store, log, owns });
  gaugesMembershipChanged = () => gauges.membershipChanged();
  // Read again soon in any case (an empty bucket's watch delivers nothing to catch up with).
  const firstGauges = setTimeout(() => void gauges.refresh(), 2_000);
  firstGauges.unref();

  // Every instance watches every grant: the initial values spread the first checks of its own
  // over two seconds; a change of one of its own asks for a run at once (skipped if its basis
  // did not change).
  const watch = await store.kv.grants.watch();
  let caughtUp = false;
  const watching = (async () => {
    for await (const e of watch) {
      if (stopped) break;
      gauges.note(e.key, e.operation === "PUT" ? watchedJson(e, (err) => log.warn({ err }, "a grant is left out of the gauges")) : undefined);
      // The grants as they are now all noted: the gauges read at once, not with some of them missing.
      if (!caughtUp && e.delta === 0) {
        caughtUp = true;
        void gauges.refresh();
      }
      if (e.operation !== "PUT") {
        known.delete(e.key);
        scheduler.cancel(e.key);
        request(e.key, { mode: "event" }).catch((err: unknown) => log.warn({ key: e.key, err: err }, "could not drop the verification of a deleted grant"));
        continue;
      }
      known.add(e.key);
      if (!owns(e.key)) continue; // its owner schedules it
      if (!e.isUpdate) {
        scheduler.after(e.key, spread());
      } else {
        request(e.key, { mode: "event" }).catch((err: unknown) => {
          stats.errors++;
          log.warn({ key: e.key, err: err }, "verification after a grant change failed; the schedule retries");
          scheduler.after(e.key, Math.min(defaultInterval, 5_000));
        });
      }
    }
  })();
  // A watch that ends while the verifier runs would leave it checking grants it no longer hears of.
  const watchEnded = watching.then(
    () => undefined,
    (e: unknown) => e,
  );
  const closed = Promise.race([
    watchEnded.then((e) => {
      if (stopped) return new Promise<never>(() => {});
      throw new Error(`the watch of the grants in KV ${Buckets.grants} ended${e === undefined ? "" : ` (${errorMessage(e)})`}`);
    }),
    membership?.closed ?? new Promise<never>(() => {}),
  ]);
  closed.catch(() => undefined);

  const probeSub = store.nc.subscribe(subjects.probeReportsAll, { queue: QueueGroups.verifier });
  const probing = (async () => {
    for await (const m of probeSub) {
      let r: ProbeReport;
      try {
        r = ProbeReport.parse(m.json());
      } catch {
        log.warn({ subject: m.subject }, "a probe report is not a ProbeReport; dropped");
        continue;
      }
      const key = reportedGrantKey(m.subject, r);
      if (!key) {
        // A report is accepted only on the subject of its own node and part (the permission pattern of that node's agent).
        log.warn({ subject: m.subject, grant: r.grant, node: r.node }, "a probe report does not match its subject; dropped");
        continue;
      }
      stats.probes++;
      request(key, { mode: "probe", probes: [r] }).catch((e: unknown) => {
        stats.errors++;
        log.warn({ grant: r.grant, err: e }, "could not fold a probe report");
      });
    }
  })();

  const verify = async (key: string, o: { repair?: boolean } = {}): Promise<VerifyOutcome> => {
    if (stopped) return { checked: false, notCheckable: "the verifier is stopping" };
    forcedRepair.set(key, (forcedRepair.get(key) ?? false) || (o.repair ?? false));
    await track(forcedQueue.enqueue(key));
    return outcomes.get(key) ?? { checked: false, notCheckable: "the verifier is stopping" };
  };

  const trail = new AuditLog(store.nc, "verifier");
  const api = serveJson(
    store.nc,
    operatorRequestSubjects(subjects.verify),
    QueueGroups.verifier,
    log,
    async (body): Promise<VerifyReply> => {
      const parsed = VerifyRequest.safeParse(body);
      if (!parsed.success)
        throw new MeshError(
          ErrorCodes.InvalidRequest,
          `not a verify request: ${parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}`,
        );
      const id = parseGrantId(parsed.data.grant);
      if (!id)
        throw new MeshError(
          ErrorCodes.InvalidRequest,
          `not a grant id: ${JSON.stringify(parsed.data.grant)} (expected <module>/<requirement>, as meshctl status shows)`,
        );
      const o = await verify(keys.grant(id.module, id.requirement), { repair: parsed.data.repair ?? false });
      if (!o.grant) throw new MeshError(ErrorCodes.NotFound, `grant ${parsed.data.grant} does not exist; meshctl status lists the grants`);
      const condition = getCondition(o.grant.conditions, "Verified");
      if (!o.checked && o.notCheckable) {
        throw new MeshError(ErrorCodes.Conflict, `grant ${parsed.data.grant} cannot be verified now: ${o.notCheckable}`, { retryable: true });
      }
      if (!condition || !o.verification)
        throw new MeshError(ErrorCodes.Internal, `grant ${parsed.data.grant} was checked but has no Verified condition`, { retryable: true });
      return { ok: true, grant: o.grant.id, condition, verification: o.verification, ...(o.repair ? { repair: o.repair } : {}) };
    },
    { audit: { log: trail, request: AuditedRequests.verify } },
  );

  const statsNow = (): VerifierStats => ({ ...stats, leadMs: Math.round(scheduler.lead.lead(defaultInterval)) });
  log.info({ instance, intervalMs: defaultInterval }, `verifier started (default interval ${defaultInterval} ms)`);
  let stopping: Promise<void> | undefined;
  return {
    instance,
    verify,
    stats: statsNow,
    closed,
    stop() {
      stopping ??= (async () => {
        stopped = true;
        scheduler.stop();
        gauges.stop();
        clearTimeout(firstGauges);
        await membership?.leave();
        await api.stop().catch(() => undefined);
        await probeSub.drain().catch(() => undefined);
        watch.stop();
        await Promise.allSettled([watching, probing, ...inflight]);
        await deps.adapters.close();
        log.info({ instance, ...statsNow() }, "verifier stopped");
      })();
      return stopping;
    },
  };
}
