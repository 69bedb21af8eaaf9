/**
 * `meshctl trace ROTATION [--json]`: the fan-out of a rotation — the rotator's states, then per
 * holder when the server recorded its ack of the broadcast, on which stream and consumer, and
 * the sequence acknowledged. A committed rotation's record holds all of it; for one still
 * running, who has acknowledged is read from the holders' consumers themselves.
 */
import { isRotationRunning, parseGrantId, parseRotationId, readHolderAcks, type Rotation } from "@mesh/shared";
import type { Store } from "@mesh/shared/runtime";
import { CliError } from "./cli-error.js";
import { ExitCodes } from "./exit-codes.js";
import type { Output } from "./output.js";
import { findRotation, latestRotation } from "./rotation-records.js";
import { formatTrace, traceRotation } from "./rotation-view.js";

export interface TraceOptions {
  /** `<module>/<requirement>#<generation>`, or `<module>/<requirement>` for the grant's latest rotation. */
  rotation: string;
  json?: boolean;
}

/** Refuses (exit 2) an argument that is neither a rotation id nor a grant id; returns the grant id. */
export function checkRotationArg(rotation: string): string {
  const grant = parseRotationId(rotation)?.grant ?? rotation;
  if (!parseGrantId(grant)) {
    throw new CliError(
      `${JSON.stringify(rotation)} is not a rotation id: give <module>/<requirement>#<generation> as meshctl rotate prints it, or <module>/<requirement> for the grant's latest rotation`,
      ExitCodes.Usage,
    );
  }
  return grant;
}

/**
 * Prints the timeline and returns 0; 2 when the argument is not a rotation or grant id, 5 when
 * no such rotation is recorded (the message names the grant's latest one, if any).
 */
export async function runTrace(store: Store, opts: TraceOptions, out: Output): Promise<number> {
  const grant = checkRotationArg(opts.rotation);
  const found = await findRotation(store, opts.rotation);
  if (!found) {
    const latest = await latestRotation(store, grant);
    const hint = latest
      ? `the mesh keeps only the latest rotations of a grant; grant ${grant}'s latest is ${latest.id} (${latest.state}): meshctl trace ${latest.id}`
      : `grant ${grant} has never been rotated; start one with: meshctl rotate ${grant}`;
    throw new CliError(`no rotation ${opts.rotation} is recorded: ${hint}`, ExitCodes.NotFound);
  }
  const t = traceRotation(isRotationRunning(found.rotation) ? await withLiveAcks(store, found.rotation) : found.rotation);
  out.out(opts.json ? JSON.stringify(t, null, 2) : formatTrace(t, { color: out.color, width: out.columns }));
  return ExitCodes.Ok;
}

/** A running rotation with the acks its holders' consumers hold now (the record is written at its commit, not per ack). */
async function withLiveAcks(store: Store, r: Rotation): Promise<Rotation> {
  const start = Date.parse(r.requestedAt);
  const holders = { ...r.holders };
  for (const a of await readHolderAcks(store.jsm, r)) {
    const p = holders[a.holder];
    if (!p || p.c !== undefined || !a.acked) continue;
    const at = a.lastActive ? Date.parse(a.lastActive) : NaN;
    holders[a.holder] = { ...p, c: Number.isNaN(at) ? Math.max(0, Date.now() - start) : Math.max(0, at - start), s: a.stream, k: a.consumer, q: a.ackFloor! };
  }
  return { ...r, holders };
}
