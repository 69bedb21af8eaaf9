/**
 * The rotation state machine as plain functions over plain data: who must confirm, what a
 * batch of confirmations changes, what to do next, and the grant's `Rotating` condition.
 * No NATS, no clock of its own (every function takes `now`), so every case is unit-tested.
 */
import {
  HOLDER_STALE_MS,
  REFUSED_LIMIT,
  RotationStates,
  holderKey,
  isRotationRunning,
  parseHolderId,
  rotationId,
  setCondition,
  type Condition,
  type Confirmation,
  type Grant,
  type HolderRegistration,
  type Rotation,
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
    refused: [],
    resource: opts.resource,
    ...(opts.traceparent ? { traceparent: opts.traceparent } : {}),
    history: [{ state: RotationStates.Staged, at: now.toISOString() }],
    trigger: opts.trigger ?? "manual",
    ...(opts.fromProvider ? { fromProvider: opts.fromProvider } : {}),
    ...(opts.requestId ? { requestId: opts.requestId } : {}),
    ...(opts.revoke ? { revoke: opts.revoke } : {}),
  };
}

/** The rotation moved to `state` (history appended); the same object when it is there already. */
export function enter(r: Rotation, state: Rotation["state"], now: Date): Rotation {
  if (r.state === state) return r;
  const next: Rotation = { ...r, state, history: [...r.history, { state, at: now.toISOString() }] };
  if (state === RotationStates.Committed) next.committedAt = now.toISOString();
  return next;
}

/** Holders that have neither confirmed nor been evicted yet, sorted. */
export function missingHolders(r: Rotation): string[] {
  return Object.entries(r.holders)
    .filter(([, p]) => p.c === undefined && p.e === undefined)
    .map(([h]) => h)
    .sort();
}

/** How many holders are missing (no list made). */
export function countMissing(r: Rotation): number {
  let n = 0;
  for (const h in r.holders) if (r.holders[h]!.c === undefined && r.holders[h]!.e === undefined) n++;
  return n;
}

/** True when every holder has confirmed or was evicted (no list made: this runs on every confirmation batch). */
export function allConfirmed(r: Rotation): boolean {
  for (const h in r.holders) if (r.holders[h]!.c === undefined && r.holders[h]!.e === undefined) return false;
  return true;
}

/**
 * The running rotation `r` with `holders` evicted (`e` set, now): it no longer waits for them.
 * Holders it does not have, or that confirmed already, are listed and left alone. Pure.
 */
export function evictHolders(r: Rotation, holders: readonly string[], now: Date): { rotation: Rotation; evicted: string[]; unknown: string[]; confirmed: string[] } {
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
 * Why a confirmation is refused by record `r` (the grant's rotation record, in any state), or
 * undefined when it is accepted or a harmless repeat: one already recorded is a repeat even
 * after the commit, and so is a holder's confirmation of any generation already committed (its
 * holder sent it again for want of an answer). `targets` (the grant's `<node>/<part>`s) shape
 * the reason of a refusal, and tell such a repeat from a forgery.
 */
export function refusal(r: Rotation | undefined, c: Confirmation, targets: ReadonlySet<string>): string | undefined {
  // The common case first, without parsing the holder id: a holder of this very rotation.
  if (r && r.grant === c.grant && c.rotation === r.id && c.generation === r.to && Object.hasOwn(r.holders, c.holder)) {
    return r.state !== RotationStates.Committed || r.holders[c.holder]!.c !== undefined ? undefined : `rotation ${r.id} of grant ${c.grant} is ${r.state}; it no longer takes confirmations`;
  }
  const id = parseHolderId(c.holder);
  const holdsGrant = id !== undefined && targets.has(holderKey(id.node, id.part));
  // A holder of the grant confirming a generation it has committed already: a repeat whose
  // answer was lost, while a newer rotation may have started. Nothing to record or refuse.
  if (r && r.grant === c.grant && holdsGrant && c.generation <= (r.state === RotationStates.Committed ? r.to : r.from)) return undefined;
  if (!r || r.grant !== c.grant || !isRotationRunning(r)) {
    return holdsGrant ? `no rotation ${c.rotation} of grant ${c.grant} is running` : `${c.holder} does not hold grant ${c.grant}`;
  }
  if (!(c.holder in r.holders)) {
    return holdsGrant
      ? `${c.holder} was not a holder of grant ${c.grant} when rotation ${r.id} started`
      : `${c.holder} does not hold grant ${c.grant}`;
  }
  if (c.rotation !== r.id || c.generation !== r.to) {
    return `${c.holder} confirmed generation ${c.generation} of rotation ${c.rotation}, but rotation ${r.id} moves to generation ${r.to}`;
  }
  return undefined;
}

/** What a batch of confirmations did to a rotation. */
export interface ConfirmationOutcome {
  /** The rotation with them recorded; the same object when nothing changed. */
  rotation: Rotation | undefined;
  accepted: Confirmation[];
  refused: Array<{ confirmation: Confirmation; reason: string }>;
}

/**
 * Records a batch of confirmations of one grant in its record `r`: accepted ones set the
 * holder's progress (received/applied from the holder's own times, confirmed = `now`), refused
 * ones are listed on a running rotation (newest {@link REFUSED_LIMIT}) and returned with their
 * reason; repeats change nothing. A record that no longer runs is never changed. `targets` is
 * the grant's current `<node>/<part>` set, to tell a forged confirmation from a late one. Pure.
 */
export function applyConfirmations(r: Rotation | undefined, batch: readonly Confirmation[], targets: ReadonlySet<string>, now: Date): ConfirmationOutcome {
  const accepted: Confirmation[] = [];
  const refused: ConfirmationOutcome["refused"] = [];
  const running = isRotationRunning(r);
  let holders = r?.holders;
  const start = r ? Date.parse(r.requestedAt) : 0;
  const offset = (iso: string | undefined) => {
    const t = iso === undefined ? NaN : Date.parse(iso);
    return Number.isNaN(t) ? undefined : Math.max(0, t - start);
  };
  for (const c of batch) {
    const why = refusal(r, c, targets);
    if (why) {
      refused.push({ confirmation: c, reason: why });
      continue;
    }
    // A repeat (already in), or one of a generation committed before this rotation: nothing to record.
    if (!running || c.rotation !== r!.id || holders![c.holder]?.c !== undefined) continue;
    if (holders === r!.holders) holders = { ...r!.holders };
    // Set field by field: a literal of conditional spreads cost a microsecond per confirmation.
    const progress: Rotation["holders"][string] = {};
    const rr = offset(c.receivedAt);
    if (rr !== undefined) progress.r = rr;
    const a = c.appliedAt === c.receivedAt ? rr : offset(c.appliedAt);
    if (a !== undefined) progress.a = a;
    progress.c = now.getTime() - start;
    holders![c.holder] = progress;
    accepted.push(c);
  }
  if (!running || (holders === r!.holders && refused.length === 0)) return { rotation: r, accepted, refused };
  const rotation: Rotation = { ...r!, holders: holders! };
  if (refused.length) {
    rotation.refused = [...r!.refused, ...refused.map((x) => ({ holder: x.confirmation.holder, at: now.toISOString(), reason: x.reason }))].slice(-REFUSED_LIMIT);
  }
  return { rotation, accepted, refused };
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

/**
 * How long after this send of a rotation's notices the next one may follow, when holders are
 * still missing: `first` after the first send, then twice the interval before, up to `max`
 * (never below `first`). Pure.
 */
export function nextNoticeInterval(previous: number | undefined, first: number, max: number): number {
  return previous === undefined ? first : Math.min(previous * 2, Math.max(first, max));
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
  const missing = missingHolders(r);
  if (r.state === RotationStates.Stalled) {
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
