/**
 * The next verification record of a grant: a new check replaces the last, and the holders'
 * probes are kept only while they describe the world as it is (a holder still a target, a probe
 * not older than a repair made since). Pure: the run writes what this returns by
 * compare-and-set, again over a fresh read when another writer got there first.
 */
import { holderKey, type CheckResult, type ProbeReport, type Verification } from "@mesh/shared";
import { probeWorthStoring } from "./fold.js";

/** What a run adds to the record. */
export interface RecordUpdate {
  grant: string;
  basis: string;
  /** The instance that checked. */
  instance: string;
  /** This run's check, if it made one. */
  result: CheckResult | undefined;
  /** The grant's holders now (`<node>/<part>`): a probe of anyone else is dropped. */
  targets: ReadonlySet<string>;
  /** Probes observed before this time (epoch ms) describe the world before a repair: dropped. */
  probesSince: number | undefined;
  /** Probe reports this run folds in. */
  probes: readonly ProbeReport[];
}

/** The record after `u` over `cur`; undefined when nothing changes (then nothing is written). */
export function nextRecord(cur: Verification | undefined, u: RecordUpdate): Verification | undefined {
  const base: Verification | undefined = u.result
    ? { grant: u.grant, basis: u.basis, checkedAt: u.result.observedAt, checkedBy: u.instance, verifier: u.result, probes: cur?.probes ?? {} }
    : cur;
  if (!base) return undefined;
  let changed = u.result !== undefined;
  const probes: Verification["probes"] = {};
  for (const [holder, probe] of Object.entries(base.probes)) {
    if (u.targets.has(holder) && !(u.probesSince !== undefined && Date.parse(probe.observedAt) < u.probesSince)) probes[holder] = probe;
    else changed = true; // no longer a holder, or from before a repair
  }
  for (const r of u.probes) {
    const holder = holderKey(r.node, r.part);
    if (!u.targets.has(holder) || !probeWorthStoring(probes[holder], r.result)) continue;
    probes[holder] = r.result;
    changed = true;
  }
  return changed ? { ...base, probes } : undefined;
}
