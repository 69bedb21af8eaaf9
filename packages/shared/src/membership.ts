/**
 * Which instances of a service are alive, and which of them owns a key: consistent partitioning
 * by a membership held in KV `mesh-instances`, so that several instances split work (each key
 * to exactly one of them) without a leader, on one NATS server or a cluster alike.
 *
 * Each instance puts a heartbeat under `<service>.<instance key>` every
 * {@link HEARTBEAT_MS}; every instance watches the service's keys and takes an instance as
 * alive while its heartbeats keep arriving (timed by the watcher's own clock, so clocks need
 * not agree), for {@link STALE_MS} after the last. A key belongs to the live instance that
 * scores highest for it under rendezvous (highest-random-weight) hashing: when an instance
 * joins or leaves, only the keys it gains or loses move. An instance that stops deletes its
 * heartbeat, so the others take its keys at once rather than after {@link STALE_MS}.
 *
 * Instances may briefly disagree on the membership (for about one message's delivery after a
 * change): the work they split must tolerate a key done twice in that moment, as the verifier
 * does by skipping a check whose record is fresh.
 */
import { createHash } from "node:crypto";
import type { KV, KvWatchEntry } from "@nats-io/kv";
import { errorMessage } from "./errors.js";
import { recordJson } from "./record-version.js";
import type { Logger } from "./logger.js";

/** How often an instance renews its heartbeat. */
export const HEARTBEAT_MS = 1_000;
/** An instance whose last heartbeat is older than this is taken as gone. */
export const STALE_MS = 3_500;
/** How long joining waits for this instance's own first heartbeat to come back. */
export const JOIN_TIMEOUT_MS = 10_000;

/** A heartbeat's value. */
export interface Heartbeat {
  service: string;
  /** The instance's name, as in its records (`verifier@host/pid`). */
  instance: string;
  startedAt: string;
}

/** The KV key of `instance` of `service`: its name with what a key may not hold replaced, and a hash to keep it unique. */
export function memberKey(service: string, instance: string): string {
  const safe = instance.replace(/[^-\w]/g, "_").slice(0, 60);
  const h = createHash("sha256").update(instance).digest("hex").slice(0, 8);
  return `${service}.${safe}-${h}`;
}

/** The rendezvous score of `member` for `key`: the first 48 bits of sha256(member, key). */
function score(member: string, key: string): number {
  return createHash("sha256").update(member).update("\0").update(key).digest().readUIntBE(0, 6);
}

/**
 * The member of `members` that owns `key` (highest score; ties to the smaller name), undefined
 * when there is none. Pure: every instance that sees the same members agrees.
 */
export function ownerOf(key: string, members: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestScore = -1;
  for (const m of members) {
    const s = score(m, key);
    if (s > bestScore || (s === bestScore && best !== undefined && m < best)) {
      best = m;
      bestScore = s;
    }
  }
  return best;
}

/** The members whose last heartbeat (by the local clock, in `lastSeen`) is younger than `staleMs` at `now`, sorted. Pure. */
export function liveMembers(lastSeen: ReadonlyMap<string, number>, now: number, staleMs = STALE_MS): string[] {
  return [...lastSeen]
    .filter(([, t]) => now - t < staleMs)
    .map(([m]) => m)
    .sort();
}

/** A joined membership; see the file's doc comment. */
export interface Membership {
  /** This instance's member key. */
  readonly self: string;
  /** The live members now (this instance always among them while it runs). */
  members(): string[];
  /** Whether this instance owns `key` now. */
  owns(key: string): boolean;
  /** Leaves: stops the heartbeat and deletes it, so the others take over at once. Idempotent. */
  leave(): Promise<void>;
  /**
   * Rejects when the watch of the others' heartbeats ends before {@link leave}: from then on
   * this instance would see itself alone and take every key, so its service fails and is
   * started again rather than going on so. Never resolves.
   */
  readonly closed: Promise<never>;
}

/**
 * Joins the membership of `service` in `kv` (the `mesh-instances` bucket) as `instance`:
 * returns once this instance's own first heartbeat came back through the watch, so the others
 * see it as soon as it sees them; throws when it cannot write or watch there (a permission),
 * or its heartbeat does not come back within {@link JOIN_TIMEOUT_MS}. `onChange` is called (with the new members) whenever the live
 * set changes, heartbeats arriving or going stale.
 */
export async function joinMembership(opts: {
  kv: KV;
  service: string;
  instance: string;
  log: Logger;
  onChange?: (members: string[]) => void;
  heartbeatMs?: number;
  staleMs?: number;
}): Promise<Membership> {
  const { kv, service, instance, log } = opts;
  const heartbeatMs = opts.heartbeatMs ?? HEARTBEAT_MS;
  const staleMs = opts.staleMs ?? STALE_MS;
  const self = memberKey(service, instance);
  const beat: Heartbeat = { service, instance, startedAt: new Date().toISOString() };
  const lastSeen = new Map<string, number>([[self, Date.now()]]);
  let current: string[] = [self];
  let left = false;

  const recompute = () => {
    const now = Date.now();
    // This instance stays a member of its own view while it runs: were its heartbeats lost
    // (a broken connection), the others take its keys and some are done twice, never none.
    lastSeen.set(self, Math.max(lastSeen.get(self) ?? 0, now));
    const next = liveMembers(lastSeen, now, staleMs);
    for (const [m, t] of lastSeen) if (now - t >= staleMs) lastSeen.delete(m);
    if (next.join("\n") !== current.join("\n")) {
      const before = current;
      current = next;
      log.info(
        { service, members: next.length, joined: next.filter((m) => !before.includes(m)), left: before.filter((m) => !next.includes(m)) },
        `${service} instances: ${next.length}`,
      );
      opts.onChange?.(next);
    }
  };

  const put = () => kv.put(self, recordJson(beat));
  let seenSelf: () => void = () => {};
  const selfSeen = new Promise<void>((r) => (seenSelf = r));
  let ended: (e: Error) => void = () => {};
  const closed = new Promise<never>((_, reject) => (ended = reject));
  // Whoever holds the membership may not wait on it; its rejection is never unhandled.
  closed.catch(() => undefined);
  const watch = await kv.watch({ key: `${service}.>` });
  void (async () => {
    for await (const e of watch as AsyncIterable<KvWatchEntry>) {
      if (e.operation === "PUT") {
        // A value from before the watch started is only as fresh as the server says it is.
        const at = e.isUpdate ? Date.now() : Math.min(Date.now(), e.created.getTime());
        lastSeen.set(e.key, at);
        if (e.key === self) seenSelf();
      } else {
        lastSeen.delete(e.key);
      }
      recompute();
    }
  })()
    .catch((e: unknown) => e)
    .then((e) => {
      if (left) return;
      const why = e === undefined ? "" : ` (${errorMessage(e)})`;
      ended(new Error(`the watch of the ${service} instances' heartbeats ended${why}: this instance would take every key as if it were alone`));
    });
  try {
    await put();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      selfSeen,
      new Promise((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`this instance's heartbeat did not come back through the watch of ${service}.> within ${JOIN_TIMEOUT_MS} ms`)),
          JOIN_TIMEOUT_MS,
        );
      }),
    ]).finally(() => clearTimeout(timer));
  } catch (e) {
    left = true;
    watch.stop();
    throw e;
  }
  const timer = setInterval(() => {
    put().catch((e: unknown) =>
      log.warn({ err: errorMessage(e) }, `could not renew this ${service} instance's heartbeat; the others take its work after ${staleMs} ms without one`),
    );
    recompute();
  }, heartbeatMs);
  timer.unref();
  recompute();

  return {
    self,
    members: () => current,
    owns: (key) => ownerOf(key, current) === self,
    closed,
    async leave() {
      if (left) return;
      left = true;
      clearInterval(timer);
      watch.stop();
      await kv.delete(self).catch(() => undefined);
    },
  };
}
