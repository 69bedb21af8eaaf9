/**
 * Whether a run of a grant checks its provider now, and by what rules: the pure decision at the
 * start of every run, from the grant, its last verification record and what the run was asked
 * for. Pure.
 */
import { holderKey, isTrue, type Grant, type ProbeReport, type RepairPolicy, type Verification } from "@mesh/shared";
import { verificationBasis } from "./fold.js";
import { intervalOf, isFresh } from "./schedule.js";
import type { RunMode } from "./run-request.js";

/** What a run knows when it starts. */
export interface RunInput {
  grant: Grant;
  /** The grant's verification record, if it has one. */
  record: Verification | undefined;
  mode: RunMode;
  probes: readonly ProbeReport[];
  /** Whether this instance owns the grant (checks it on its schedule and on its changes). */
  mine: boolean;
  now: number;
  defaultIntervalMs: number;
}

/** What the run does, and the rules it does it by. */
export interface RunDecision {
  intervalMs: number;
  policy: RepairPolicy;
  /** A rotation is running: a repair would race it. */
  rotating: boolean;
  /** What the record's check must have been of to count (verificationBasis). */
  basis: string;
  /** Provisioned at its provider: there is something to check. */
  checkable: boolean;
  /** Check the provider in this run (rather than only fold probes, or skip a fresh check). */
  check: boolean;
}

/**
 * The decision: check when the grant is checkable and the run was forced, or a probe shows a
 * holder's node newly failing while the verifier's last check passed (so the condition tells
 * "fails from that node" from "fails everywhere" rather than guess), or, for a grant this
 * instance owns, when its record is missing, of another basis or generation, or no longer
 * fresh. A grant another instance owns is otherwise left to its owner.
 */
export function decideRun(input: RunInput): RunDecision {
  const { grant: g, record: rec, mode, probes, mine, now } = input;
  const intervalMs = intervalOf(g, input.defaultIntervalMs);
  const basis = verificationBasis(g);
  const checkable = isTrue(g.conditions, "Provisioned") && g.resource.provider === g.provider;
  const newFailure = probes.some((r) => {
    const prev = rec?.probes[holderKey(r.node, r.part)];
    return !r.result.ok && r.result.generation === g.generation && rec?.verifier.ok === true && (!prev || prev.ok || prev.reason !== r.result.reason);
  });
  const stale = !rec || rec.basis !== basis || rec.verifier.generation !== g.generation || !isFresh(rec.checkedAt, intervalMs, now);
  return {
    intervalMs,
    policy: g.repair ?? "auto",
    rotating: isTrue(g.conditions, "Rotating"),
    basis,
    checkable,
    check: checkable && (mode === "forced" || newFailure || (mine && stale)),
  };
}
