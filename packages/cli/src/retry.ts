/**
 * meshctl rides out what the mesh marks retryable: a service that does not answer for a moment
 * (no responders while it restarts or reconnects), a refusal the service marks retryable
 * (JetStream without a leader, a config reload), JetStream not answering meshctl's own reads.
 * Each command has a deadline (default {@link DEFAULT_DEADLINE_MS}, `--timeout`); attempts back
 * off from 250 ms to 2 s, and none starts past the deadline. What is retried must be safe to
 * send again: apply is idempotent, and rotate carries a request id the rotator answers with the
 * rotation it already started.
 */
import { setTimeout as delay } from "node:timers/promises";
import { backoffMs, errorMessage, isMeshError } from "@mesh/shared";
import { isJetStreamGap, isJetStreamTimeout, jetStreamTimeoutMessage } from "@mesh/shared/runtime";
import { CliError, isCliError } from "./cli-error.js";
import { isNoResponders } from "./nats-errors.js";
import type { Output } from "./output.js";
import { printable } from "./style.js";

/** How long a command keeps trying what the mesh marks retryable, unless `--timeout` says otherwise. */
export const DEFAULT_DEADLINE_MS = 30_000;
/** The first pause between attempts; it doubles up to {@link MAX_PAUSE_MS}. */
export const FIRST_PAUSE_MS = 250;
export const MAX_PAUSE_MS = 2_000;
/** No attempt starts with less than this left before the deadline: it could not get an answer. */
const LAST_ATTEMPT_MS = 100;
/** An attempt with at least this long before the deadline had its full chance: its failure is the one said. */
const FULL_ATTEMPT_MS = 1_000;

export interface RetryPolicy {
  /** Epoch ms past which no attempt starts. */
  readonly deadline: number;
  /** The deadline as a duration, for messages (`30 s`). */
  readonly withinMs: number;
  /** The option that sets the deadline, for messages: `--timeout`, `rotate`'s `--request-timeout`; none for `up`. */
  readonly option: string | undefined;
  /** Told of every failed attempt that is tried again. */
  onRetry(what: string, attempt: number, error: unknown, pauseMs: number): void;
  /** Random numbers in [0, 1) for the pauses' jitter (backoffMs); a test passes its own. */
  readonly random?: () => number;
}

/** Time left before the policy's deadline, at least 1 ms: what a request of one attempt may wait for. */
export function remainingMs(policy: RetryPolicy, now = Date.now()): number {
  return Math.max(1, policy.deadline - now);
}

/**
 * The policy of one command: `--timeout` (default 30 s) from now. Every retried attempt is
 * shown on standard error under `verbose`; without it, only the first retry, once, so a long
 * wait is never silent.
 */
export function retryPolicy(
  opts: {
    withinMs?: number;
    verbose?: boolean;
    /** Default `--timeout`; `null` for a command without such options (`up`). */
    option?: string | null;
    /** For the pauses' jitter; default Math.random. */
    random?: () => number;
  },
  out: Pick<Output, "err">,
  now = Date.now(),
): RetryPolicy {
  const withinMs = opts.withinMs ?? DEFAULT_DEADLINE_MS;
  const option = opts.option === null ? undefined : (opts.option ?? "--timeout");
  let told = false;
  return {
    deadline: now + withinMs,
    withinMs,
    option,
    ...(opts.random ? { random: opts.random } : {}),
    onRetry(what, attempt, error, pauseMs) {
      const why = printable(firstLine(errorMessage(error)).replace(/\.$/, ""));
      if (opts.verbose) {
        out.err(`meshctl: ${what}: attempt ${attempt} failed: ${why}; trying again in ${pauseMs} ms`);
      } else if (!told) {
        told = true;
        out.err(`meshctl: ${what}: ${why}; trying again for up to ${seconds(withinMs)}${option ? ` (${option}; --verbose shows each attempt)` : ""}`);
      }
    },
  };
}

/** Whether meshctl may send again what failed with `e`. */
export function isRetryable(e: unknown): boolean {
  return isRetryableError(e);
}

function isRetryableError(e: unknown): boolean {
  if (isCliError(e)) return e.retryable;
  if (isMeshError(e)) return e.retryable || isJetStreamGap(e);
  return isJetStreamGap(e) || isNoResponders(e);
}

/**
 * Runs `fn` until it succeeds, fails with what is not retryable, or the deadline leaves no
 * time for another attempt; then throws the last error. A {@link CliError} that was retried is
 * thrown with how long it was tried added to its message; its exit code stays.
 */
export async function retrying<T>(what: string, policy: RetryPolicy, fn: (attempt: number) => Promise<T>, opts: { read?: boolean } = {}): Promise<T> {
  const start = Date.now();
  // A read changes nothing, so one that timed out (a cluster electing a new leader of the bucket's stream) is simply made again.
  const isRetryable = opts.read ? (e: unknown) => isRetryableError(e) || isJetStreamTimeout(e) : isRetryableError;
  // The failure of the last attempt that had a second or more to get its answer: one squeezed into the deadline's last
  // moments may only have run out of time (a "no responders" that took longer than it had, on a loaded machine).
  let lastFull: unknown;
  for (let attempt = 1; ; attempt++) {
    const full = policy.deadline - Date.now() >= FULL_ATTEMPT_MS;
    try {
      return await fn(attempt);
    } catch (caught) {
      const e = !full && lastFull !== undefined && isRetryable(caught) ? lastFull : caught;
      if (full) lastFull = caught;
      // The last pause ends just before the deadline, so the last attempt is made in time.
      const left = policy.deadline - Date.now() - LAST_ATTEMPT_MS;
      const pauseMs = Math.min(backoffMs(attempt, { firstMs: FIRST_PAUSE_MS, maxMs: MAX_PAUSE_MS }, policy.random), left);
      if (!isRetryable(e) || pauseMs <= 0) {
        if (attempt === 1 || !isRetryable(e)) throw e;
        const tried = `(tried ${attempt} times over ${seconds(Date.now() - start)}${policy.option ? `; ${policy.option} gives it longer` : ""})`;
        if (isCliError(e)) throw new CliError(`${e.message}\n${tried}`, e.exitCode, { cause: e.cause ?? e });
        throw new CliError(`${isJetStreamTimeout(e) ? jetStreamTimeoutMessage(what) : `${what} failed: ${errorMessage(e)}`} ${tried}`, undefined, { cause: e });
      }
      policy.onRetry(what, attempt, e, pauseMs);
      await new Promise((r) => setTimeout(r, pauseMs));
    }
  }
}

/**
 * Waits `ms`, or less when `signal` aborts; never rejects. The timer's abort listener goes with
 * it, so a loop that pauses hundreds of times on one signal leaves none behind.
 */
export function pause(ms: number, signal: AbortSignal): Promise<void> {
  return delay(ms, undefined, { signal }).catch(() => undefined);
}

const firstLine = (s: string) => s.split("\n", 1)[0]!;
const seconds = (ms: number) => `${Math.round(ms / 100) / 10} s`;
