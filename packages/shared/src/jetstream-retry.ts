/**
 * Riding out a JetStream that does not answer for a moment (a config reload, a leader
 * election): which errors say so, and retries bounded in time.
 */
import { backoffMs, sleep } from "./backoff.js";
import { JetStreamApiError } from "@nats-io/jetstream";
import { errorMessage } from "./errors.js";

/**
 * Whether `e` says that JetStream did not answer for now, rather than that it is missing for good.
 * 2.9.10 says it both ways during a reload ("jetstream is not enabled", "JetStream not enabled for
 * account"), and a cluster member that knows it has no meta leader answers "JetStream system
 * temporarily unavailable" (10008) until the others elect one.
 */
export function isJetStreamGap(e: unknown): boolean {
  const said = errorMessage(e);
  return SILENT.test(said) || NO_META_LEADER.test(said) || NO_ACCOUNT.test(said);
}

/**
 * Why JetStream was not there for a request, as far as its client can tell:
 * - `cluster-electing`: a member of a cluster with no leader for what was asked (its meta
 *   group, or a stream's), as while the others elect one after a server was lost. Such a member
 *   answers "JetStream system temporarily unavailable" (10008) once it knows, and nothing at all
 *   before (a timeout, or no responders while it restarts).
 * - `server-without-jetstream`: no one answers JetStream's API, and the server said in its INFO
 *   that it runs without JetStream.
 * - `account-without-jetstream`: the server has JetStream, not for the connection's account (10039);
 *   2.9.10 also says so for a moment while it reloads its configuration.
 * - `no-answer`: one server with JetStream did not answer in time (loaded or stuck), or had no
 *   responders for its API (reloading).
 */
export type JetStreamUnavailable = "cluster-electing" | "server-without-jetstream" | "account-without-jetstream" | "no-answer";

/** What JetStream's API says when no one answers it: no responders, which the client calls "jetstream is not enabled". */
const SILENT = /no responders|jetstream (is )?not enabled/i;
/** 10008, from a cluster member that knows it has no meta leader. */
const NO_META_LEADER = /jetstream system temporarily unavailable/i;
/** 10039. */
const NO_ACCOUNT = /not enabled for account/i;

/**
 * Which {@link JetStreamUnavailable} `e` (or one of its causes) is, met by a JetStream request on a
 * connection to a server that said `info` of itself in its INFO; undefined for any other error.
 */
export function jetStreamUnavailable(e: unknown, info: { jetstream?: boolean; cluster?: string } | undefined): JetStreamUnavailable | undefined {
  const said = causes(e).map(errorMessage).join("\n");
  if (NO_META_LEADER.test(said)) return "cluster-electing";
  if (NO_ACCOUNT.test(said)) return "account-without-jetstream";
  const silent = isJetStreamTimeout(e) || SILENT.test(said);
  if (!silent) return undefined;
  if (info && info.jetstream !== true) return "server-without-jetstream";
  return info?.cluster ? "cluster-electing" : "no-answer";
}

/** `e` and its causes, at most eight deep. */
function causes(e: unknown): unknown[] {
  const all: unknown[] = [];
  for (let cur = e, i = 0; cur && i < 8; cur = (cur as { cause?: unknown }).cause, i++) all.push(cur);
  return all;
}

/**
 * Whether `e` (or one of its causes) is a JetStream request, KV read or watch that got no answer
 * in time. On a cluster that is what a server lost or restarting looks like while the others
 * elect a leader of the meta group or of a stream (5–10 s seen here on 2.9.10); on one server,
 * an overloaded or stuck server. Safe to try again only for what changes nothing (a read, a watch).
 */
export function isJetStreamTimeout(e: unknown): boolean {
  return causes(e).some((cur) => cur instanceof Error && (cur.name === "TimeoutError" || /^timeout$/i.test(cur.message)));
}

/** What to tell a user whose `what` met {@link isJetStreamTimeout} (at `url`): what happened, and what to do about it. */
export function jetStreamTimeoutMessage(what: string, url?: string): string {
  return (
    `${what}: JetStream${url ? ` at ${url}` : ""} did not answer in time. On a cluster this is a server lost or restarting while the others ` +
    `elect new leaders, which passes by itself within about 10 s while most servers run. Try again in a few seconds; if it goes on, ` +
    `check that a majority of the cluster's servers are running (each one's /healthz on its monitoring port).`
  );
}

/**
 * Runs `fn` again while JetStream does not answer: no responders ({@link isJetStreamGap}) or no
 * answer in time ({@link isJetStreamTimeout}), until `withinMs` has passed; then throws the last
 * error. Only for what is safe to run twice: a read, a watch, or steps that, run again, find
 * what the first run wrote and change nothing more (a request answered under its request id).
 * A request that timed out may have been done: its reply can be lost on the way (a cluster's
 * election, or this process reconnecting with a new identity while it waited).
 */
export function retryJetStreamIdempotent<T>(fn: () => Promise<T>, withinMs = JETSTREAM_GAP_RIDE_OUT_MS): Promise<T> {
  return retryWhile(fn, (e) => isJetStreamGap(e) || isJetStreamTimeout(e), withinMs);
}

/**
 * How long {@link retryJetStreamGap} rides out a JetStream that does not answer, by default.
 * Longer than the gaps seen here (a config reload's ~100 ms, reloads in quick succession that
 * kept it quiet for more than 1.5 s, and over 4.5 s of them on a loaded machine; a cluster's
 * leader election, about 5 s), shorter than a client's 30 s deadline, so a request handler
 * that still meets the gap answers with a retryable error while its caller is still waiting.
 */
export const JETSTREAM_GAP_RIDE_OUT_MS = 10_000;

/**
 * Runs `fn`, again while JetStream does not answer ({@link isJetStreamGap}): its API has no
 * responders whenever the server reloads its config (every nats.user change, measured on
 * 2.9.10), and while a cluster elects a leader. Waits from 100 ms, doubling, at most 500 ms,
 * with jitter (backoff.ts); gives up with the last error once `withinMs` (default {@link JETSTREAM_GAP_RIDE_OUT_MS})
 * has passed. Any other error is thrown at once.
 */
export function retryJetStreamGap<T>(fn: () => Promise<T>, withinMs = JETSTREAM_GAP_RIDE_OUT_MS): Promise<T> {
  return retryWhile(fn, isJetStreamGap, withinMs);
}

/**
 * Whether `e` is JetStream's "error creating store for stream" (10049). nats-server says only
 * that to its client and writes the cause to its own log; on a cluster it is what a stream
 * created while the cluster is still forming, or created by two processes at once, may get,
 * and creating it again succeeds (seen here: meshctl bootstrap on a three-server cluster that
 * had just elected its meta leader). On one server a full or unwritable disk says it too, for
 * good.
 */
export function isStoreCreateFailure(e: unknown): boolean {
  return e instanceof JetStreamApiError && (e.code === 10049 || /error creating store for stream/i.test(e.message));
}

/**
 * Runs `fn`, which makes the store's buckets and streams, again while JetStream does not answer
 * ({@link isJetStreamGap}) or fails to create a stream's store ({@link isStoreCreateFailure}),
 * until `withinMs` has passed; then throws the last error.
 */
export function retryJetStreamSetup<T>(fn: () => Promise<T>, withinMs: number): Promise<T> {
  return retryWhile(fn, (e) => isJetStreamGap(e) || isStoreCreateFailure(e), withinMs);
}

/** Runs `fn` again while it fails with what `again` accepts, after waits from 100 ms to 500 ms with jitter, until `withinMs` has passed. */
async function retryWhile<T>(fn: () => Promise<T>, again: (e: unknown) => boolean, withinMs: number): Promise<T> {
  const end = Date.now() + withinMs;
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn();
    } catch (e) {
      const left = end - Date.now();
      if (left <= 0 || !again(e)) throw e;
      await sleep(Math.min(backoffMs(attempt, { firstMs: 100, maxMs: 500 }), left));
    }
  }
}
