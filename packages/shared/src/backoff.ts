/**
 * Exponential back-off with jitter: the one formula for every wait before trying again (a
 * request that failed, a consumer looked for again, a message that comes back later, a
 * service restarted after it exited).
 *
 * The wait before try `attempt` (1: the first retry) is `firstMs` doubled per attempt, at most
 * `maxMs`; a share `jitter` of it is random (default {@link DEFAULT_JITTER}: between half and
 * all of it). The randomness is what keeps many processes that failed together (every holder of
 * a mesh after a NATS outage, every agent after a server restart) from trying again together,
 * round after round, in lockstep: "equal jitter" in the terms of the AWS Architecture Blog's
 * "Exponential Backoff And Jitter", which keeps a floor under each wait where full jitter
 * would sometimes retry at once.
 */

/** How waits grow: from `firstMs`, doubling, at most `maxMs`; a share `jitter` (0 to 1) of each is random. */
export interface Backoff {
  firstMs: number;
  maxMs: number;
  /** 0: every wait exact; 1: anywhere from nothing to all of it; default {@link DEFAULT_JITTER}. */
  jitter?: number;
}

/** The random share of a wait when a {@link Backoff} names none: between half and all of it. */
export const DEFAULT_JITTER = 0.5;

/** The wait before try `attempt` (1 for the first retry; below 1 counts as 1), in whole milliseconds. */
export function backoffMs(attempt: number, b: Backoff, random: () => number = Math.random): number {
  // Capped before it is raised, so a large attempt count never overflows to Infinity.
  const doublings = Math.min(Math.max(Math.floor(attempt) - 1, 0), 52);
  const full = Math.min(b.maxMs, b.firstMs * 2 ** doublings);
  const jitter = Math.min(Math.max(b.jitter ?? DEFAULT_JITTER, 0), 1);
  return Math.round(full * (1 - jitter * random()));
}

/** Resolves after `ms`. */
export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/**
 * How long a check that has just started failing waits before it is made once more: a login
 * refused or reset while a server reloads (the mesh reloads its NATS server for each new
 * certificate), restarts or fails over passes within it, and is not recorded as a failure nor
 * repaired.
 */
export const CONFIRM_FAILURE_MS = 1_000;

/**
 * Runs `attempt` and, when `failed` says its outcome is a failure and `confirm` is true, runs it
 * once more after `pauseMs` and returns that outcome: a failure is recorded only when two
 * attempts agree. Callers confirm only a change from success, so a provider that stays down
 * costs one attempt per check, not two.
 */
export async function confirmFailure<T>(
  attempt: () => Promise<T>,
  failed: (outcome: T) => boolean,
  confirm: boolean,
  pauseMs = CONFIRM_FAILURE_MS,
): Promise<T> {
  const first = await attempt();
  if (!confirm || !failed(first)) return first;
  await sleep(pauseMs);
  return attempt();
}
