/**
 * The rotation state machine as plain functions over plain data: who must confirm, the moves
 * it may make ({@link TRANSITIONS}), what JetStream's acks add, what to do next, and the grant's `Rotating` condition.
 * No NATS, no clock of its own (every function takes `now`), so every case is unit-tested.
 */
import {
  broadcastKey,
  holderEndpoint,
  isHolderPending,
  HOLDER_STALE_MS,
  RotationStates,
  holderKey,
  rotationId,
  setCondition,
  type Condition,
  type Grant,
  type HolderRegistration,
  type Rotation,
  type RotationState,
} from "@mesh/shared";

/**
 * Every holder that must confirm a rotation of `grant` starting `now`: the node agents that
 * hold a generation of it for a part that is still a target (`<node>/<part>`), and the SDK
 * instances registered for a target part and seen within {@link HOLDER_STALE_MS}
 * (`<node>/<part>/<instance>`). A target never delivered holds nothing, so it need not confirm;
 * it gets the new generation from the provisioner after the commit. Sorted.
 */
export function holdersOf(grant: Grant, registrations: readonly HolderRegistration[], now: Date): string[] {
  const targets = new Set(grant.targets.map((t) => holderKey(t.node, t.part)));
  const out = new Set<string>();
  for (const [key, h] of Object.entries(grant.holders)) if (targets.has(key) && h.generation > 0) out.add(key);
  for (const r of registrations) {
    if (r.grant !== grant.id || !targets.has(holderKey(r.node, r.part))) continue;
    if (now.getTime() - Date.parse(r.seenAt) > HOLDER_STALE_MS) continue;
    out.add(r.holder);
  }
  return [...out].sort();
}

/** A new rotation of `grant` from its generation k to k+1, in state `Staged`. */
export function newRotation(opts: {
  grant: Grant;
  holders: readonly string[];
  resource: Record<string, string>;
  timeoutMs: number;
  now: Date;
  trigger?: Rotation["trigger"];
  traceparent?: string;
  /** For a handover: the provider generation k lives on (the grant's `resource.provider`). */
  fromProvider?: string;
  /** The rotate request's id, so its retries find this rotation. */
  requestId?: string;
  /** A revocation: the deadline is the grace, and it commits then, confirmed or not. */
  revoke?: Rotation["revoke"];
  /** The generation it moves to; default the grant's next (a revocation superseding a rotation skips the one that staged). */
  to?: number;
}): Rotation {
  const { grant, now } = opts;
  const to = opts.to ?? grant.generation + 1;
  return {
    id: rotationId(grant.id, to),
    grant: grant.id,
    module: grant.module,
    requirement: grant.requirement,
    kind: grant.kind,
    provider: grant.provider!,
    from: grant.generation,
    to,
    state: RotationStates.Staged,
    requestedAt: now.toISOString(),
    deadline: new Date(now.getTime() + (opts.revoke ? opts.revoke.graceMs : opts.timeoutMs)).toISOString(),
    holders: Object.fromEntries(opts.holders.map((h) => [h, {}])),
    broadcasts: [],
    resource: opts.resource,
    ...(opts.traceparent ? { traceparent: opts.traceparent } : {}),
    history: [{ state: RotationStates.Staged, at: now.toISOString() }],
    trigger: opts.trigger ?? "manual",
    ...(opts.fromProvider ? { fromProvider: opts.fromProvider } : {}),
    ...(opts.requestId ? { requestId: opts.requestId } : {}),
    ...(opts.revoke ? { revoke: opts.revoke } : {}),
  };
}

/**
 * Every move a rotation may make, and no other: staged k+1 is broadcast, the broadcast awaits
 * the holders, who all confirm (commit) or do not by the deadline (stall), and a stalled one
 * commits once they have (or at a revocation's grace). `Committed` is the end.
 */
export const TRANSITIONS: Readonly<Record<RotationState, readonly RotationState[]>> = {
  [RotationStates.Staged]: [RotationStates.Broadcast],
  [RotationStates.Broadcast]: [RotationStates.AwaitingHolders],
  [RotationStates.AwaitingHolders]: [RotationStates.Stalled, RotationStates.Committed],
  [RotationStates.Stalled]: [RotationStates.Committed],
  [RotationStates.Committed]: [],
};

/** A move {@link TRANSITIONS} does not have: a bug, never a state of the world. */
export class IllegalTransition extends Error {
  constructor(
    readonly from: RotationState,
    readonly to: RotationState,
  ) {
    super(`a rotation cannot go from ${from} to ${to} (it may go to ${TRANSITIONS[from].join(" or ") || "nothing: it is over"})`);
  }
}

/** The rotation moved to `state` (history appended); the same object when it is there already. Throws {@link IllegalTransition} for a move the table does not have. */
export function enter(r: Rotation, state: RotationState, now: Date): Rotation {
  if (r.state === state) return r;
  if (!TRANSITIONS[r.state].includes(state)) throw new IllegalTransition(r.state, state);
  const next: Rotation = { ...r, state, history: [...r.history, { state, at: now.toISOString() }] };
  if (state === RotationStates.Committed) next.committedAt = now.toISOString();
  return next;
}

/** Holders that have neither confirmed nor been evicted yet, sorted. */
export function missingHolders(r: Rotation): string[] {
  return Object.entries(r.holders)
    .filter(([, p]) => isHolderPending(p))
    .map(([h]) => h)
    .sort();
}

/** True when every holder has confirmed or was evicted (no list made: this runs on every confirmation batch). */
export function allConfirmed(r: Rotation): boolean {
  for (const h in r.holders) if (isHolderPending(r.holders[h]!)) return false;
  return true;
}

/**
 * The running rotation `r` with `holders` evicted (`e` set, now): it no longer waits for them.
 * Holders it does not have, or that confirmed already, are listed and left alone. Pure.
 */
export function evictHolders(
  r: Rotation,
  holders: readonly string[],
  now: Date,
): { rotation: Rotation; evicted: string[]; unknown: string[]; confirmed: string[] } {
  const evicted: string[] = [];
  const unknown: string[] = [];
  const confirmed: string[] = [];
  const next = { ...r.holders };
  for (const h of holders) {
    const p = next[h];
    if (!p) unknown.push(h);
    else if (p.c !== undefined) confirmed.push(h);
    else if (p.e === undefined) {
      next[h] = { ...p, e: Math.max(0, now.getTime() - Date.parse(r.requestedAt)) };
      evicted.push(h);
    }
  }
  return { rotation: evicted.length ? { ...r, holders: next } : r, evicted, unknown, confirmed };
}

/**
 * The rotation `r` with the confirmations JetStream has for it (`acks`, by holder): each holder
 * that acknowledged gets `c` (the server's time of its ack, since `requestedAt`) and the
 * sequence (`q`), the stream and consumer it acknowledged on (`s`, `k`) only where they are not
 * the holder's own endpoint (at thousands of holders they were most of the committed record),
 * and `f` when the ack was found in the consumer's ack floor rather than seen. Holders the
 * operator evicted keep `e`. The same object when there is nothing to add. Pure.
 */
export function withAcks(r: Rotation, acks: ReadonlyMap<string, { at: number; stream: string; consumer: string; seq: number; found?: true }>): Rotation {
  if (acks.size === 0) return r;
  const start = Date.parse(r.requestedAt);
  const holders = { ...r.holders };
  for (const [h, a] of acks) {
    const p = holders[h];
    if (!p || p.c !== undefined) continue;
    const next: Rotation["holders"][string] = { ...p, c: Math.max(0, a.at - start), q: a.seq };
    const own = holderEndpoint(r.grant, h);
    if (own?.stream !== a.stream || own.consumer !== a.consumer) Object.assign(next, { s: a.stream, k: a.consumer });
    if (a.found) next.f = true;
    holders[h] = next;
  }
  return { ...r, holders };
}

/**
 * Running rotation `r` with part of its broadcast published again (`again`: where, and the
 * sequences those streams gave it): their entries in `broadcasts` replaced, the others kept, a
 * stream not in them added, and `republished` counted up (each round's message id is its own).
 * Pure.
 */
export function withRepublished(r: Rotation, again: Rotation["broadcasts"]): Rotation {
  const fresh = new Map(again.map((b) => [broadcastKey(b.stream, b.subject), b]));
  const broadcasts = r.broadcasts.map((b) => {
    const key = broadcastKey(b.stream, b.subject);
    const n = fresh.get(key);
    fresh.delete(key);
    return n ?? b;
  });
  return { ...r, broadcasts: [...broadcasts, ...fresh.values()], republished: (r.republished ?? 0) + 1 };
}

/** How many holders of `r` have confirmed. */
export function confirmedCount(r: Rotation): number {
  let n = 0;
  for (const h in r.holders) if (r.holders[h]!.c !== undefined) n++;
  return n;
}

/**
 * How long after its broadcast a rotation's acks are left to the server's ack metrics alone.
 * The sweep's look at every missing holder's consumer (one JetStream API request each: a
 * thousand at a thousand holders) is for what the metrics missed (one lost, acks before this
 * instance ran, a consumer that vanished); in a rotation's first seconds the metrics are still
 * coming, and a look then costs the server and the rotator what the acks themselves do.
 */
export const ACK_LOOKUP_AFTER_MS = 2_000;

/** Whether the sweep should look at the consumers of running rotation `r`'s missing holders now: broadcast at least {@link ACK_LOOKUP_AFTER_MS} ago. Pure. */
export function ackLookupDue(r: Rotation, now: Date): boolean {
  const broadcast = r.history.find((h) => h.state === RotationStates.Broadcast);
  // Written by an older rotator without the entry: looked at, as before.
  if (!broadcast) return r.state !== RotationStates.Staged;
  return now.getTime() - Date.parse(broadcast.at) >= ACK_LOOKUP_AFTER_MS;
}

/** The next thing to do for a rotation. */
export type RotationStep =
  | { action: "broadcast" }
  | { action: "await" }
  | { action: "commit" }
  | { action: "stall"; missing: string[] }
  | { action: "wait"; untilMs: number }
  | { action: "none" };

/**
 * What to do with `r` now: broadcast a `Staged` one; mark a `Broadcast` one as awaiting; commit
 * once nobody is missing; stall an awaiting one past its deadline; otherwise wait (until the
 * deadline, for an awaiting one). Pure.
 */
export function nextStep(r: Rotation, now: Date): RotationStep {
  switch (r.state) {
    case RotationStates.Staged:
      return { action: "broadcast" };
    case RotationStates.Broadcast:
      return { action: "await" };
    case RotationStates.AwaitingHolders:
    case RotationStates.Stalled: {
      if (allConfirmed(r)) return { action: "commit" };
      const deadline = Date.parse(r.deadline);
      // A revocation does not wait past its grace: the old generation goes, and who has not switched is locked out.
      if (r.revoke && now.getTime() >= deadline) return { action: "commit" };
      if (r.state === RotationStates.AwaitingHolders && now.getTime() >= deadline) return { action: "stall", missing: missingHolders(r) };
      return r.state === RotationStates.AwaitingHolders || r.revoke ? { action: "wait", untilMs: deadline } : { action: "none" };
    }
    default:
      return { action: "none" };
  }
}

/** A short list of holders for a message: the first few, then how many more. */
export function nameHolders(holders: readonly string[], max = 5): string {
  const shown = holders.slice(0, max).join(", ");
  return holders.length > max ? `${shown} and ${holders.length - max} more` : shown;
}

/**
 * The grant's conditions with `Rotating` as the rotation says: True/`AwaitingHolders` with the
 * count while holders confirm, True/`HolderTimedOut` naming the missing ones when stalled, and
 * removed once committed. The same array when nothing changes.
 */
export function withRotatingCondition(conditions: Condition[], r: Rotation, now: Date): Condition[] {
  if (r.state === RotationStates.Committed) {
    return conditions.some((c) => c.type === "Rotating") ? conditions.filter((c) => c.type !== "Rotating") : conditions;
  }
  const total = Object.keys(r.holders).length;
  if (r.state === RotationStates.Stalled) {
    // Sorted names of every missing holder: only a stall's message names them.
    const missing = missingHolders(r);
    return setCondition(
      conditions,
      {
        type: "Rotating",
        status: "True",
        reason: "HolderTimedOut",
        message: `rotation ${r.id} stalled: ${missing.length} of ${total} holders have not confirmed generation ${r.to} (${nameHolders(missing)}); generation ${r.from} keeps working, and the rotation commits by itself when they confirm`,
      },
      now,
    );
  }
  return setCondition(
    conditions,
    {
      type: "Rotating",
      status: "True",
      reason: "AwaitingHolders",
      // The count of confirmations lives in the rotation record: writing it here would rewrite the grant per confirmation.
      message: `rotation ${r.id}: generation ${r.from} → ${r.to} (${r.state}), waiting for ${total} holder${total === 1 ? "" : "s"} to confirm`,
    },
    now,
  );
}

/**
 * The generations of a credential to purge once generation `current` is committed, of the
 * `stored` ones, keeping the newest `keep` (current included; at least 2, so the one just
 * retired stays for the verifier to recognise). None of a grant a provider needs
 * (`needed`): that provider's server may have been initialised with any of them. Pure.
 */
export function generationsToPurge(stored: readonly number[], current: number, keep: number, needed: boolean): number[] {
  if (needed) return [];
  const floor = current - Math.max(2, keep);
  return stored.filter((g) => g <= floor).sort((a, b) => a - b);
}
