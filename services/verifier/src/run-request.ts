/**
 * What a run of a grant was asked for, merged: the requests made before a run starts (a
 * grant change, a probe report, the schedule, `meshctl verify`) become one run, of the most
 * demanding mode among them, repairing if any asked to, with every probe report. Pure.
 */
import type { ProbeReport } from "@mesh/shared";

/** Why a grant is run: a probe report came in, its schedule is due, it changed, or `meshctl verify` asked. */
export type RunMode = "probe" | "scheduled" | "event" | "forced";

/** How demanding each mode is: a merged run takes the highest. */
const RANK: Record<RunMode, number> = { probe: 0, scheduled: 1, event: 2, forced: 3 };

/** One run of a grant, as asked. */
export interface RunRequest {
  mode: RunMode;
  /** Repair once whatever the policy (`meshctl verify --repair`). */
  repair: boolean;
  /** Probe reports to fold in. */
  probes: ProbeReport[];
  /** When a scheduled run was due (epoch ms): its check's lateness past it measures the lead. */
  dueAt?: number;
}

/** What one request asks for; `repair` and `probes` default to none. */
export interface RunWant {
  mode: RunMode;
  repair?: boolean;
  probes?: ProbeReport[];
  dueAt?: number;
}

/** `want` merged into the run already asked for (`cur`, if any): the higher mode, repair if either, every probe, the first due time. */
export function mergeRun(cur: RunRequest | undefined, want: RunWant): RunRequest {
  const dueAt = cur?.dueAt ?? want.dueAt;
  return {
    mode: cur && RANK[cur.mode] > RANK[want.mode] ? cur.mode : want.mode,
    repair: (cur?.repair ?? false) || (want.repair ?? false),
    probes: [...(cur?.probes ?? []), ...(want.probes ?? [])],
    ...(dueAt !== undefined ? { dueAt } : {}),
  };
}
