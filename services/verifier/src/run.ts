/**
 * One run of a grant: read it and its record, decide whether to check (decide.ts), check the
 * provider (check.ts), repair by policy (repair-plan.ts) and check again, fold the holders'
 * probes into the record (record.ts), write the record and, when it changes, the grant's
 * `Verified` condition (fold.ts), and place the grant's next check (check-scheduler.ts). Every
 * write is a compare-and-set; a repair is idempotent, so two runs of one grant converge.
 */
import { Grant, Verification, confirmFailure, errorMessage, getCondition, holderKey, setCondition, type CheckResult, type RepairEvent } from "@mesh/shared";
import { mutateJson, readJson, recordRepair, recordVerification, type Store } from "@mesh/shared/runtime";
import type { Logger } from "@mesh/shared/service";
import { checkGrant, repairGrant, type CheckDeps } from "./check.js";
import type { CheckScheduler } from "./check-scheduler.js";
import { decideRun } from "./decide.js";
import { foldVerified } from "./fold.js";
import { requestProbes } from "./probes.js";
import { nextRecord } from "./record.js";
import { appendRepair, describeRepair, repairAction } from "./repair-plan.js";
import type { RunRequest } from "./run-request.js";

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

/** What every run of one verifier shares. */
export interface RunContext {
  store: Store;
  deps: CheckDeps;
  log: Logger;
  instance: string;
  defaultIntervalMs: number;
  probeTimeoutMs: number;
  random: () => number;
  stats: Omit<VerifierStats, "leadMs">;
  scheduler: CheckScheduler;
  /** Whether this instance owns `key` (checks it on its schedule and on its changes). */
  owns(key: string): boolean;
}

/** Runs the grant stored under `key` as `p` asks; see the file's doc comment. */
export async function runGrant(ctx: RunContext, key: string, p: RunRequest): Promise<VerifyOutcome> {
  const { store, log, scheduler, stats } = ctx;
  const found = await readJson(store.kv.grants, key, Grant);
  if (!found) {
    scheduler.cancel(key);
    const e = await store.kv.verifications.get(key);
    if (e && e.operation === "PUT") await store.kv.verifications.delete(key);
    return { checked: false, notCheckable: "the grant does not exist" };
  }
  const g = found.value;
  const glog = log.child({ grant: g.id });
  if (!g.provider || g.generation < 1) {
    // Nothing to verify (not resolved, or no credential yet): a Verified condition from before would mislead.
    scheduler.cancel(key);
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
  const rec = await readJson(store.kv.verifications, key, Verification);
  const d = decideRun({
    grant: g,
    record: rec?.value,
    mode: p.mode,
    probes: p.probes,
    mine: ctx.owns(key),
    now: Date.now(),
    defaultIntervalMs: ctx.defaultIntervalMs,
  });

  let probes = p.mode === "forced" ? [...p.probes, ...(await requestProbes(store.nc, g, ctx.probeTimeoutMs, log))] : p.probes;
  /** Probes observed before this time describe the world before a repair: they no longer count. */
  let probesSince: number | undefined;
  const targets = new Set(g.targets.map((t) => holderKey(t.node, t.part)));

  // The record as read above starts the first write (it is usually still current: one owner writes it).
  let recRead: typeof rec | null = rec ?? null;
  /** Writes the record (a new check, or only new probes) and, when it changes, the grant's Verified condition. */
  const persist = async (result: CheckResult | undefined, extra: { repair?: RepairEvent; repairFailed?: string } = {}) => {
    const read = recRead;
    recRead = undefined;
    const stored = await mutateJson(
      store.kv.verifications,
      key,
      Verification,
      (cur) => nextRecord(cur, { grant: g.id, basis: d.basis, instance: ctx.instance, result, targets, probesSince, probes }),
      read !== undefined ? { read } : {},
    );
    if (!stored || stored.verifier.generation !== g.generation) return { stored, grant: g };
    const cond = foldVerified({
      grant: g,
      verifier: stored.verifier,
      probes: stored.probes,
      now: Date.now(),
      policy: d.policy,
      rotating: d.rotating,
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
  if (d.check) {
    // A grant that was passing fails only when a second check a moment later agrees: a server
    // reloading or failing over refuses a login for milliseconds, which is no drift to repair.
    const passing = rec?.value.verifier.ok !== false || rec.value.verifier.generation !== g.generation;
    result = await confirmFailure(
      () => {
        stats.checks++;
        return checkGrant(ctx.deps, g);
      },
      (r) => r !== undefined && !r.ok,
      passing,
    );
    if (result && !result.ok) {
      // A failure is recorded, and repaired, against the grant as it is: one that moved on while
      // it was checked (a rotation committed) is checked again by its change's own run.
      const now = (await readJson(store.kv.grants, key, Grant))?.value;
      if (!now || now.generation !== g.generation || now.provider !== g.provider) {
        return { grant: now ?? g, checked: false, notCheckable: "it changed while it was checked (a new generation); it is checked again" };
      }
    }
    if (result) recordVerification(g.kind, result.ok, result.reason);
    if (result && p.dueAt !== undefined) {
      scheduler.lead.add(Date.parse(result.observedAt) - p.dueAt);
      // Only against this instance's own check before: after a start or a handover the gap says nothing of its capacity.
      const gap = rec && rec.value.checkedBy === ctx.instance ? Date.parse(result.observedAt) - Date.parse(rec.value.checkedAt) : 0;
      if (gap > d.intervalMs) scheduler.noteLate(gap, d.intervalMs);
    }
    const action =
      result && !result.ok ? repairAction(result.reason!, { policy: d.policy, requested: p.repair, rotating: d.rotating, kind: g.kind }) : undefined;
    if (result && action) {
      // The diagnosis first, so that the drift is on record even if this process dies while repairing.
      await persist(result);
      const at = new Date().toISOString();
      const foundMessage = result.message;
      const diagnosed = result.reason!;
      const by = p.repair ? `${ctx.instance} (meshctl verify --repair)` : ctx.instance;
      let outcome: RepairEvent["outcome"];
      let did: string | undefined;
      try {
        did = await repairGrant(ctx.deps, g, action, by);
        const again = await checkGrant(ctx.deps, g);
        stats.checks++;
        if (again) recordVerification(g.kind, again.ok, again.reason);
        if (again) result = again;
        outcome = again?.ok ? "repaired" : "unverified";
        if (!again?.ok) repairFailed = "it was applied, but the check still fails";
        // What the holders' nodes saw before the repair is obsolete: ask them again now.
        probesSince = Date.now();
        probes = [...probes.filter((r) => Date.parse(r.result.observedAt) >= probesSince!), ...(await requestProbes(store.nc, g, ctx.probeTimeoutMs, log))];
      } catch (e) {
        outcome = "failed";
        repairFailed = errorMessage(e);
      }
      stats.repairs++;
      recordRepair(g.kind, action, outcome);
      const message = `${describeRepair(action, diagnosed, g.generation, foundMessage, did)}${repairFailed ? `; ${outcome}: ${repairFailed}` : ""}`;
      repair = { at, by, action, reason: diagnosed, generation: g.generation, outcome, message, requested: p.repair };
      const fields = { repair: { action, reason: diagnosed, generation: g.generation, outcome, by } };
      if (outcome === "repaired") glog.info(fields, `repair ${outcome}: ${message}`);
      else glog.warn(fields, `repair ${outcome}: ${message}`);
    }
  } else if (p.mode !== "probe") {
    stats.skipped++;
  }
  const { stored, grant } = await persist(result, { ...(repair ? { repair } : {}), ...(repairFailed ? { repairFailed } : {}) });

  if (d.checkable) {
    if (result || !scheduler.has(key)) {
      const checkedAt = stored?.checkedAt ?? rec?.value.checkedAt;
      scheduler.next(key, d.intervalMs, checkedAt ? Date.parse(checkedAt) : undefined, ctx.random());
    }
  } else {
    scheduler.cancel(key);
  }
  return {
    grant,
    ...(stored ? { verification: stored } : {}),
    ...(repair ? { repair } : {}),
    checked: result !== undefined,
    ...(d.checkable ? {} : { notCheckable: "it is not provisioned at its provider yet (see its Provisioned condition)" }),
  };
}
