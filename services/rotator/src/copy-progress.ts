/**
 * A handover's copy as its rotation record says it while it runs (`carrying`, for `meshctl
 * rotate --wait` and whoever reads the record): which of the copy's many reports get written,
 * the first and then one a second (a blob streams in pieces of 128 KiB, and the record can be
 * tens of KB), and what the record becomes with one. Pure.
 */
import { RotationStates, type Rotation } from "@mesh/shared";
import type { CopyProgress } from "@mesh/providers";

/** How often a copy's progress is written into its rotation record, at most. */
export const PROGRESS_WRITE_MS = 1_000;

/** A gate that opens the first time it is asked, then once `everyMs` passed since it last opened; `now` in milliseconds. */
export function everyAtMost(everyMs: number): (now: number) => boolean {
  let last: number | undefined;
  return (now) => {
    if (last !== undefined && now - last < everyMs) return false;
    last = now;
    return true;
  };
}

/**
 * Record `x` saying that rotation `r`'s copy has come to `p` (written at `at`); undefined when
 * `x` is no longer `r` staging, so nothing is written over a record that moved on.
 */
export function withCarrying(x: Rotation | undefined, r: Rotation, p: CopyProgress, at: string): Rotation | undefined {
  if (!x || x.id !== r.id || x.state !== RotationStates.Staged) return undefined;
  const { total, copied, present, bytes, artifact } = p;
  return { ...x, carrying: { total, copied, present, bytes, at, ...(artifact ? { artifact } : {}) } };
}
