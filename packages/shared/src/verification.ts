/**
 * Reading a grant's verification record: which agents' probes still count, and the most
 * recent check with where it came from ("verified 3 s ago from node-a"). Pure; used by the
 * verifier to fold the `Verified` condition and by meshctl to show it.
 */
import { formatAge } from "./duration.js";
import { holderKey, type Grant } from "./schemas/grant.js";
import type { ProbeResult } from "./schemas/verification.js";

/** A probe older than this no longer counts: its agent has stopped reporting (three missed reports and 2 s of slack). */
export function probeStaleAfter(intervalMs: number): number {
  return 3 * intervalMs + 2_000;
}

/** A probe that counts, with the holder it is about. */
export interface CurrentProbe {
  holder: string;
  node: string;
  part: string;
  probe: ProbeResult;
}

/**
 * The probes that count at `now`, sorted by holder: of a current target of the grant, of its
 * current generation, and not stale ({@link probeStaleAfter}).
 */
export function currentProbes(
  g: Pick<Grant, "generation" | "targets"> & Partial<Pick<Grant, "holders">>,
  probes: Readonly<Record<string, ProbeResult>>,
  now: number,
): CurrentProbe[] {
  const out: CurrentProbe[] = [];
  for (const t of [...g.targets].sort((a, b) => holderKey(a.node, a.part).localeCompare(holderKey(b.node, b.part)))) {
    const holder = holderKey(t.node, t.part);
    const p = probes[holder];
    if (!p || p.generation !== g.generation) continue;
    // A probe from before the holder was delivered what it holds is of something else: a grant
    // deleted and declared again starts at generation 1 anew, and its old probes say nothing of it.
    const delivered = g.holders?.[holder]?.deliveredAt;
    if (delivered && Date.parse(p.observedAt) < Date.parse(delivered)) continue;
    const age = now - Date.parse(p.observedAt);
    if (!(age <= probeStaleAfter(p.intervalMs))) continue;
    out.push({ holder, node: t.node, part: t.part, probe: p });
  }
  return out;
}

/**
 * The most recent check of a grant and where it came from: `verifier` for the verifier's own
 * check, or the node of a probe that counts, whichever is newer.
 */
export function lastCheck(
  g: Pick<Grant, "generation" | "targets">,
  v: { checkedAt: string; probes: Readonly<Record<string, ProbeResult>> },
  now: number,
): { at: string; from: string } {
  let best = { at: v.checkedAt, from: "verifier" };
  for (const p of currentProbes(g, v.probes, now)) {
    if (Date.parse(p.probe.observedAt) > Date.parse(best.at)) best = { at: p.probe.observedAt, from: p.node };
  }
  return best;
}

/** `verified 3 s ago from node-a` when `verified`, else `checked 3 s ago from verifier`. */
export function describeLastCheck(verified: boolean, last: { at: string; from: string }, now: number): string {
  const t = Date.parse(last.at);
  const age = Number.isNaN(t) ? "?" : `${formatAge(now - t)} ago`;
  return `${verified ? "verified" : "checked"} ${age} from ${last.from}`;
}
