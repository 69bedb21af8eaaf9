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
  Buckets,
  ErrorCodes,
  Grant,
  KeyedQueue,
  MeshError,
  ProbeReply,
  ProbeReport,
  QueueGroups,
  Verification,
  VerifyRequest,
  errorMessage,
  getCondition,
  holderKey,
  isTrue,
  joinMembership,
  keys,
  mutateJson,
  parseGrantId,
  readJson,
  requestJson,
  serveJson,
  setCondition,
  subjects,
  type CheckResult,
  type Membership,
  type RepairEvent,
  type VerifyReply,
} from "@mesh/shared";
import { AdapterPool, CredentialStore, keysOf } from "@mesh/providers";
import { checkGrant, repairGrant, type CheckDeps } from "./check.js";
import { foldVerified, probeWorthStoring, verificationBasis } from "./fold.js";
import { appendRepair, describeRepair, repairAction } from "./repair-plan.js";
import { CheckTimeline, LeadEstimator, globalInterval, intervalOf, isFresh, type Placement } from "./schedule.js";
import type { VerifierOptions } from "./verifier-options.js";

/** What one run of a grant ended with. */
export interface VerifyOutcome {
  /** The grant after the run; undefined when it does not exist. */
  grant?: Grant;
  verification?: Verification;
  /** The repair made in this run. */
  repair?: RepairEvent;
  /** Whether the verifier itself checked the provider in this run (not only folded probes). */
  checked: boolean;
  /** Why the grant cannot be checked now, when it cannot. */
  notCheckable?: string;
}

/** Counters since start, for the benchmark and the log. */
export interface VerifierStats {
  /** Checks made (a repair's re-check included). */
  checks: number;
  /** Runs that found a fresh check and did not check again. */
  skipped: number;
  repairs: number;
  /** Probe reports received. */
  probes: number;
  /** `Verified` condition changes written. */
  transitions: number;
  /** Runs that failed (store errors); retried. */
  errors: number;
  /** How much earlier than its deadline a check of the default interval is asked for now (ms): schedule.ts's LeadEstimator. */
  leadMs: number;
  /** Scheduled checks made later than their interval after this instance's own check before (it is past its capacity when they grow). */
  late: number;
}

/** A running verifier. */
export interface Verifier {
  /** This instance's name. */
  readonly instance: string;
  /** Checks `<module>.<requirement>` now (asking its holders' agents to probe too); with `repair`, repairs once whatever the policy. */
  verify(key: string, opts?: { repair?: boolean }): Promise<VerifyOutcome>;
  stats(): VerifierStats;
  /** Stops scheduling and serving, waits for the runs in work. Idempotent. */
  stop(): Promise<void>;
}

type Mode = "probe" | "scheduled" | "event" | "forced";
const RANK: Record<Mode, number> = { probe: 0, scheduled: 1, event: 2, forced: 3 };
interface Pending {
  mode: Mode;
  repair: boolean;
  probes: ProbeReport[];
  /** When a scheduled run was due (epoch ms): its check's lateness past it measures the lead. */
  dueAt?: number;
}

/** Starts a verifier; see the file's doc comment. */
export async function startVerifier(opts: VerifierOptions): Promise<Verifier> {
  const { store, log } = opts;
  const env = opts.env ?? process.env;
  const defaultInterval = opts.intervalMs ?? globalInterval(env);
  const instance = opts.instance ?? `verifier@${hostname()}/${process.pid}`;
  const random = opts.random ?? Math.random;
  const probeTimeoutMs = opts.probeTimeoutMs ?? 3_000;
  const deps: CheckDeps = {
    store,
    credentials: new CredentialStore(store.kv.credentials, opts.masterKey),
    adapters: new AdapterPool(env, keysOf(opts.masterKey).kek),
    env,
  };
  const stats: Omit<VerifierStats, "leadMs"> = { checks: 0, skipped: 0, repairs: 0, probes: 0, transitions: 0, errors: 0, late: 0 };
  /** Late checks not yet told in the log, and the longest gap among them; told at most once a minute. */
  const lateness = { count: 0, worstMs: 0, toldAt: 0 };

  const pending = new Map<string, Pending>();
  /** Which grants this instance checks on its schedule; joined before the grants are watched (undefined: it could not join, and checks them all). */
  let membership: Membership | undefined;
  const owns = (key: string) => membership?.owns(key) ?? true;
  const outcomes = new Map<string, VerifyOutcome>();
  const timers = new Map<string, { timer: NodeJS.Timeout; placed: Placement }>();
  const timeline = new CheckTimeline();
  const lead = new LeadEstimator();
  const inflight = new Set<Promise<void>>();
  let stopped = false;

  const queue = new KeyedQueue(async (key) => {
    const p = pending.get(key) ?? { mode: "event", repair: false, probes: [] };
    pending.delete(key);
    await reconcile(key, p);
  }, opts.concurrency ?? 16);

  // Forced checks (meshctl verify) have their own small queue, so that an answer does not wait
  // behind a backlog of scheduled checks when the verifier is saturated.
  const forcedRepair = new Map<string, boolean>();
  const forcedQueue = new KeyedQueue(async (key) => {
    const repair = forcedRepair.get(key) ?? false;
    forcedRepair.delete(key);
    outcomes.set(key, await reconcile(key, { mode: "forced", repair, probes: [] }));
  }, 4);

  /** Asks for a run of `key`; requests made before the run starts are merged into it. */
  const request = (key: string, want: { mode: Mode; repair?: boolean; probes?: ProbeReport[]; dueAt?: number }): Promise<void> => {
    if (stopped) return Promise.resolve();
    const cur = pending.get(key);
    const dueAt = cur?.dueAt ?? want.dueAt;
    pending.set(key, {
      mode: cur && RANK[cur.mode] > RANK[want.mode] ? cur.mode : want.mode,
      repair: (cur?.repair ?? false) || (want.repair ?? false),
      probes: [...(cur?.probes ?? []), ...(want.probes ?? [])],
      ...(dueAt !== undefined ? { dueAt } : {}),
    });
    const run = queue.enqueue(key);
    const tracked = run.catch(() => undefined);
    inflight.add(tracked);
    void tracked.finally(() => inflight.delete(tracked));
    return run;
  };

  const unschedule = (key: string) => {
    const t = timers.get(key);
    if (!t) return;
    clearTimeout(t.timer);
    timeline.release(t.placed);
    timers.delete(key);
  };
  /** Sets the timer of a placement on the timeline. */
  const scheduleAt = (key: string, placed: Placement) => {
    if (stopped) return timeline.release(placed);
    unschedule(key);
    const timer = setTimeout(
      () => {
        timers.delete(key);
        timeline.release(placed);
        // Another instance owns it now: it is scheduled there (and here again if it comes back, see onChange).
        if (!owns(key)) return;
        request(key, { mode: "scheduled", dueAt: placed.at }).catch((e: unknown) => {
          stats.errors++;
          log.warn({ key, err: e }, "scheduled verification failed; retrying");
          schedule(key, Math.min(defaultInterval, 5_000));
        });
      },
      Math.max(0, placed.at - Date.now()),
    );
    timer.unref();
    timers.set(key, { timer, placed });
  };
  /** Schedules a run of `key` in `delayMs` (a retry, a first check). */
  const schedule = (key: string, delayMs: number) => scheduleAt(key, timeline.placeAt(Date.now() + delayMs, defaultInterval));

  /** Counts a scheduled check made `gapMs` after the one before, past its interval, and says so in the log at most once a minute. */
  const noteLate = (gapMs: number, intervalMs: number) => {
    stats.late++;
    lateness.count++;
    lateness.worstMs = Math.max(lateness.worstMs, gapMs);
    const now = Date.now();
    if (now - lateness.toldAt < 60_000) return;
    log.warn(
      { late: lateness.count, worstGapMs: lateness.worstMs, intervalMs, leadMs: Math.round(lead.lead(intervalMs)) },
      `${lateness.count} grant check(s) came later than their interval (${intervalMs} ms) after the check before, the latest ${lateness.worstMs} ms after: this verifier is past what it and its providers can check in an interval; run another verifier instance (they split the grants), or set a longer verify.every or MESH_VERIFY_INTERVAL`,
    );
    Object.assign(lateness, { count: 0, worstMs: 0, toldAt: now });
  };

  /** Probes of `g` from its holders' agents, asked for now; agents that do not answer are left out. */
  const requestProbes = async (g: Grant): Promise<ProbeReport[]> => {
    const nodes = [...new Set(g.targets.map((t) => t.node))];
    const replies = await Promise.all(
      nodes.map(async (node) => {
        try {
          const reply = ProbeReply.safeParse(
            await requestJson(store.nc, subjects.probeRequest(node), { grant: g.id }, { service: `agent of node ${node}`, timeoutMs: probeTimeoutMs }),
          );
          if (!reply.success || !reply.data.ok) return [];
          return reply.data.reports.filter((r) => r.grant === g.id && r.node === node);
        } catch (e) {
          log.debug({ grant: g.id, node, err: e }, "no probe from this node's agent");
          return [];
        }
      }),
    );
    return replies.flat();
  };

  const reconcile = async (key: string, p: Pending): Promise<VerifyOutcome> => {
    const found = await readJson(store.kv.grants, key, Grant);
    if (!found) {
      unschedule(key);
      outcomes.delete(key);
      const e = await store.kv.verifications.get(key);
      if (e && e.operation === "PUT") await store.kv.verifications.delete(key);
      return { checked: false, notCheckable: "the grant does not exist" };
    }
    const g = found.value;
    const glog = log.child({ grant: g.id });
    if (!g.provider || g.generation < 1) {
      // Nothing to verify (not resolved, or no credential yet): a Verified condition from before would mislead.
      unschedule(key);
      const updated = await mutateJson(store.kv.grants, key, Grant, (cur) =>
        cur && (!cur.provider || cur.generation < 1) && getCondition(cur.conditions, "Verified")
          ? { ...cur, conditions: cur.conditions.filter((c) => c.type !== "Verified") }
          : undefined,
      );
      return {
        grant: updated ?? g,
        checked: false,
        notCheckable: !g.provider ? "it has no provider (see its Resolved condition)" : "it has no credential yet (generation 0)",
      };
    }
    const interval = intervalOf(g, defaultInterval);
    const policy = g.repair ?? "auto";
    const rotating = isTrue(g.conditions, "Rotating");
    const now = Date.now();
    const rec = await readJson(store.kv.verifications, key, Verification);
    const basis = verificationBasis(g);
    const checkable = isTrue(g.conditions, "Provisioned") && g.resource.provider === g.provider;
    // A holder's node newly failing while the verifier's last check passed: check now, so the
    // condition tells "fails from that node" from "fails everywhere" rather than guess.
    const newFailure = p.probes.some((r) => {
      const prev = rec?.value.probes[holderKey(r.node, r.part)];
      return !r.result.ok && r.result.generation === g.generation && rec?.value.verifier.ok === true && (!prev || prev.ok || prev.reason !== r.result.reason);
    });
    // A grant another instance owns is checked here only when asked (meshctl verify) or when a
    // probe folded here shows a new failure; otherwise its owner's schedule and events keep it.
    const mine = owns(key);
    const needCheck =
      checkable &&
      (p.mode === "forced" ||
        newFailure ||
        (mine && (!rec || rec.value.basis !== basis || rec.value.verifier.generation !== g.generation || !isFresh(rec.value.checkedAt, interval, now))));

    let probes = p.mode === "forced" ? [...p.probes, ...(await requestProbes(g))] : p.probes;
    /** Probes observed before this time describe the world before a repair: they no longer count. */
    let probesSince: number | undefined;
    const targets = new Set(g.targets.map((t) => holderKey(t.node, t.part)));

    /** Writes the record (a new check, or only new probes) and, when it changes, the grant's Verified condition. */
    // The record as read above starts the first write (it is usually still current: one owner writes it).
    let recRead: typeof rec | null = rec ?? null;
    const persist = async (result: CheckResult | undefined, extra: { repair?: RepairEvent; repairFailed?: string } = {}) => {
      const read = recRead;
      recRead = undefined;
      const stored = await mutateJson(
        store.kv.verifications,
        key,
        Verification,
        (cur) => {
          const base: Verification | undefined = result
            ? { grant: g.id, basis, checkedAt: result.observedAt, checkedBy: instance, verifier: result, probes: cur?.probes ?? {} }
            : cur;
          if (!base) return undefined;
          let changed = result !== undefined;
          const next: Verification["probes"] = {};
          for (const [holder, probe] of Object.entries(base.probes)) {
            if (targets.has(holder) && !(probesSince !== undefined && Date.parse(probe.observedAt) < probesSince)) next[holder] = probe;
            else changed = true; // no longer a holder, or from before a repair
          }
          for (const r of probes) {
            const holder = holderKey(r.node, r.part);
            if (!targets.has(holder) || !probeWorthStoring(next[holder], r.result)) continue;
            next[holder] = r.result;
            changed = true;
          }
          return changed ? { ...base, probes: next } : undefined;
        },
        read !== undefined ? { read } : {},
      );
      if (!stored || stored.verifier.generation !== g.generation) return { stored, grant: g };
      const cond = foldVerified({
        grant: g,
        verifier: stored.verifier,
        probes: stored.probes,
        now: Date.now(),
        policy,
        rotating,
        ...(extra.repairFailed ? { repairFailed: extra.repairFailed } : {}),
      });
      // The grant as read at the start already says this (the usual outcome): no read of it again.
      // A change of the grant since then is an event of its own, which runs this again.
      if (!extra.repair && setCondition(g.conditions, cond) === g.conditions) return { stored, grant: g };
      let changed = false;
      const updated = await mutateJson(store.kv.grants, key, Grant, (cur) => {
        if (!cur || cur.generation !== g.generation || cur.provider !== g.provider) return undefined; // moved on: its own event follows
        const conditions = setCondition(cur.conditions, cond);
        changed = conditions !== cur.conditions;
        if (!changed && !extra.repair) return undefined;
        return { ...cur, conditions, ...(extra.repair ? { repairs: appendRepair(cur.repairs, extra.repair) } : {}) };
      });
      if (changed) {
        stats.transitions++;
        const line = { status: cond.status, reason: cond.reason, message: cond.message };
        if (cond.status === "True") glog.info({ verified: line }, `verified: ${cond.message}`);
        else glog.warn({ verified: line }, `not verified (${cond.reason}): ${cond.message}`);
      }
      return { stored, grant: updated ?? g };
    };

    let result: CheckResult | undefined;
    let repair: RepairEvent | undefined;
    let repairFailed: string | undefined;
    if (needCheck) {
      result = await checkGrant(deps, g);
      stats.checks++;
      if (result && p.dueAt !== undefined) {
        lead.add(Date.parse(result.observedAt) - p.dueAt);
        // Only against this instance's own check before: after a start or a handover the gap says nothing of its capacity.
        const gap = rec && rec.value.checkedBy === instance ? Date.parse(result.observedAt) - Date.parse(rec.value.checkedAt) : 0;
        if (gap > interval) noteLate(gap, interval);
      }
      const action = result && !result.ok ? repairAction(result.reason!, { policy, requested: p.repair, rotating, kind: g.kind }) : undefined;
      if (result && action) {
        // The diagnosis first, so that the drift is on record even if this process dies while repairing.
        await persist(result);
        const at = new Date().toISOString();
        const found = result.message;
        const diagnosed = result.reason!;
        const by = p.repair ? `${instance} (meshctl verify --repair)` : instance;
        let outcome: RepairEvent["outcome"];
        let did: string | undefined;
        try {
          did = await repairGrant(deps, g, action, by);
          const again = await checkGrant(deps, g);
          stats.checks++;
          if (again) result = again;
          outcome = again?.ok ? "repaired" : "unverified";
          if (!again?.ok) repairFailed = "it was applied, but the check still fails";
          // What the holders' nodes saw before the repair is obsolete: ask them again now.
          probesSince = Date.now();
          probes = [...probes.filter((r) => Date.parse(r.result.observedAt) >= probesSince!), ...(await requestProbes(g))];
        } catch (e) {
          outcome = "failed";
          repairFailed = errorMessage(e);
        }
        stats.repairs++;
        const message = `${describeRepair(action, diagnosed, g.generation, found, did)}${repairFailed ? `; ${outcome}: ${repairFailed}` : ""}`;
        repair = { at, by, action, reason: diagnosed, generation: g.generation, outcome, message, requested: p.repair };
        const fields = { repair: { action, reason: diagnosed, generation: g.generation, outcome, by } };
        if (outcome === "repaired") glog.info(fields, `repair ${outcome}: ${message}`);
        else glog.warn(fields, `repair ${outcome}: ${message}`);
      }
    } else if (p.mode !== "probe") {
      stats.skipped++;
    }
    const { stored, grant } = await persist(result, { ...(repair ? { repair } : {}), ...(repairFailed ? { repairFailed } : {}) });

    if (checkable) {
      if (result || !timers.has(key)) {
        const checkedAt = stored?.checkedAt ?? rec?.value.checkedAt;
        scheduleAt(key, timeline.place(interval, checkedAt ? Date.parse(checkedAt) : undefined, Date.now(), lead.lead(interval), random()));
      }
    } else {
      unschedule(key);
    }
    return {
      grant,
      ...(stored ? { verification: stored } : {}),
      ...(repair ? { repair } : {}),
      checked: result !== undefined,
      ...(checkable ? {} : { notCheckable: "it is not provisioned at its provider yet (see its Provisioned condition)" }),
    };
  };

  // The grants this instance knows of (from the watch below), so that when the membership
  // changes it schedules those it gained. A grant it gained is checked when its record says it
  // is due: the instance that had it checked it within the interval, which is not repeated.
  const known = new Set<string>();
  const spread = () => Math.round(random() * Math.min(defaultInterval, 2_000));
  try {
    membership = await joinMembership({
      kv: store.kv.instances,
      service: "verifier",
      instance,
      log,
      onChange: () => {
        for (const key of known) if (!timers.has(key) && owns(key)) schedule(key, spread());
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

  // Every instance watches every grant: the initial values spread the first checks of its own
  // over two seconds; a change of one of its own asks for a run at once (skipped if its basis
  // did not change).
  const watch = await store.kv.grants.watch();
  const watching = (async () => {
    for await (const e of watch) {
      if (stopped) break;
      if (e.operation !== "PUT") {
        known.delete(e.key);
        unschedule(e.key);
        request(e.key, { mode: "event" }).catch((err: unknown) => log.warn({ key: e.key, err: err }, "could not drop the verification of a deleted grant"));
        continue;
      }
      known.add(e.key);
      if (!owns(e.key)) continue; // its owner schedules it
      if (!e.isUpdate) {
        schedule(e.key, spread());
      } else {
        request(e.key, { mode: "event" }).catch((err: unknown) => {
          stats.errors++;
          log.warn({ key: e.key, err: err }, "verification after a grant change failed; the schedule retries");
          schedule(e.key, Math.min(defaultInterval, 5_000));
        });
      }
    }
  })();

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
      const id = parseGrantId(r.grant);
      if (!id || m.subject !== safeSubject(r.node, id.module, r.part, id.requirement)) {
        // A report is accepted only on the subject of its own node and part (the permission pattern of that node's agent).
        log.warn({ subject: m.subject, grant: r.grant, node: r.node }, "a probe report does not match its subject; dropped");
        continue;
      }
      stats.probes++;
      request(keys.grant(id.module, id.requirement), { mode: "probe", probes: [r] }).catch((e: unknown) => {
        stats.errors++;
        log.warn({ grant: r.grant, err: e }, "could not fold a probe report");
      });
    }
  })();

  const verify = async (key: string, o: { repair?: boolean } = {}): Promise<VerifyOutcome> => {
    if (stopped) return { checked: false, notCheckable: "the verifier is stopping" };
    forcedRepair.set(key, (forcedRepair.get(key) ?? false) || (o.repair ?? false));
    const run = forcedQueue.enqueue(key);
    const tracked = run.catch(() => undefined);
    inflight.add(tracked);
    void tracked.finally(() => inflight.delete(tracked));
    await run;
    return outcomes.get(key) ?? { checked: false, notCheckable: "the verifier is stopping" };
  };

  const api = serveJson(store.nc, subjects.verify, QueueGroups.verifier, log, async (body): Promise<VerifyReply> => {
    const parsed = VerifyRequest.safeParse(body);
    if (!parsed.success)
      throw new MeshError(ErrorCodes.InvalidRequest, `not a verify request: ${parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}`);
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
  });

  const statsNow = (): VerifierStats => ({ ...stats, leadMs: Math.round(lead.lead(defaultInterval)) });
  log.info({ instance, intervalMs: defaultInterval }, `verifier started (default interval ${defaultInterval} ms)`);
  let stopping: Promise<void> | undefined;
  return {
    instance,
    verify,
    stats: statsNow,
    stop() {
      stopping ??= (async () => {
        stopped = true;
        for (const key of [...timers.keys()]) unschedule(key);
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

/** The subject a report of `node`/`part` must arrive on; undefined for names that cannot be in a subject. */
function safeSubject(node: string, module: string, part: string, requirement: string): string | undefined {
  try {
    return subjects.probeReport(node, module, part, requirement);
  } catch {
    return undefined;
  }
}
