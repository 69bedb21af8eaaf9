/**
 * Rotation records and messages: moving every holder of a grant from generation k to k+1.
 * The rotator owns {@link Rotation} (KV `mesh-rotations`, key `<module>.<requirement>`, one
 * per grant, compare-and-set on its revision) and publishes its {@link RotationBroadcast} into
 * the holders' streams; each holder confirms by acknowledging it on its own consumer
 * (holder-streams.ts). SDK holders register a {@link HolderRegistration} (KV `mesh-holders`),
 * which is how the control plane knows to make their consumer.
 */
import { z } from "zod";
import { KIND_LIST } from "../kinds.js";
import { DURATION_PATTERN, durationAtMost } from "../duration.js";
import { MAX_ROTATE_EVERY_MS, MAX_TIMER_MS } from "../limits.js";

/** A requirement's `rotate:` schedule: `{ every: 30d }` rotates the grant that often (counted from its current generation). */
export const RotatePolicy = z.strictObject({
  every: z
    .string()
    .regex(DURATION_PATTERN, { message: "must be a duration such as 12h, 30d" })
    .refine((s) => durationAtMost(s, MAX_ROTATE_EVERY_MS), { message: "must be at most 3650d" })
    .describe("A duration such as 12h, 30d (at most 3650d), counted from the grant's current generation."),
});
export type RotatePolicy = z.infer<typeof RotatePolicy>;

/** States of a rotation. `Committed` is the only terminal one; `Stalled` goes on to `Committed` by itself. */
export const RotationStates = {
  /** Generation k+1 is written (encrypted, write-ahead) and staged on the provider beside k: both log in. */
  Staged: "Staged",
  /** k+1 was announced to every holder: one broadcast into each holder stream with holders of the grant (the record keeps each stream's sequence). */
  Broadcast: "Broadcast",
  /** Waiting for every holder's confirmation; the grant's `Rotating` condition says how many are in. */
  AwaitingHolders: "AwaitingHolders",
  /** Past the deadline with holders missing (named in `Rotating`); k still works; commits when they confirm. */
  Stalled: "Stalled",
  /** Every holder confirmed, k retired, the grant is on k+1. */
  Committed: "Committed",
} as const;
export type RotationState = (typeof RotationStates)[keyof typeof RotationStates];

/**
 * One holder's part in a rotation, compact because a rotation may have thousands of holders.
 * Written when the rotation starts (empty) and once more at its commit, never per
 * confirmation: while it runs, who has confirmed is JetStream's own record (each holder's
 * consumer's ack floor). Times are milliseconds since the rotation's `requestedAt`.
 */
export const HolderProgress = z.object({
  /** Older records: the holder's own times of receipt and apply. */
  r: z.number().optional(),
  a: z.number().optional(),
  /** Confirmed: when the server recorded the holder's ack (its ack metric's timestamp, the server's clock). */
  c: z.number().optional(),
  /** Evicted by the operator (`meshctl rotate --evict`): the rotation went on without it. */
  e: z.number().optional(),
  /**
   * The stream and consumer it acknowledged on, only where they are not the ones holder-streams.ts
   * names for the holder (`holderAckedOn` reads either; records written before this always name
   * them), and the stream sequence it acknowledged (the broadcast).
   */
  s: z.string().optional(),
  k: z.string().optional(),
  q: z.number().int().optional(),
  /**
   * The ack was found in the consumer's ack floor, not seen as it happened (a rotator started
   * after it, or its metric was lost): `c` is then when the rotator found it, not when it was sent.
   */
  f: z.literal(true).optional(),
});
export type HolderProgress = z.infer<typeof HolderProgress>;

/** What a handover's copy of a registry grant's artifacts did, or has done so far. */
const CopyCounts = z.object({
  /** Artifacts at the old provider. */
  total: z.number().int().nonnegative(),
  /** Copied by the run (that completed the copy, or that is under way). */
  copied: z.number().int().nonnegative(),
  /** Already at the new provider when that run looked (copied by an earlier run, or put there). */
  present: z.number().int().nonnegative(),
  /** Bytes that run copied. */
  bytes: z.number().int().nonnegative(),
  /** When this was written. */
  at: z.string(),
});

export const Rotation = z.object({
  /** `<module>/<requirement>#<to>`: what `meshctl trace` takes. */
  id: z.string(),
  grant: z.string(),
  module: z.string(),
  requirement: z.string(),
  kind: z.enum(KIND_LIST),
  provider: z.string(),
  from: z.number().int().positive(),
  to: z.number().int().positive(),
  state: z.enum(Object.values(RotationStates) as [RotationState, ...RotationState[]]),
  requestedAt: z.string(),
  /** Past this, a rotation still awaiting holders is `Stalled`. */
  deadline: z.string(),
  /**
   * Every holder that must confirm, by holder id: `<node>/<part>` for a node agent,
   * `<node>/<part>/<instance>` for an SDK instance.
   */
  holders: z.record(z.string(), HolderProgress),
  /**
   * The broadcast as published: one message per holder stream that has holders of the grant
   * (see holder-streams.ts), with the stream sequence each got. A holder has confirmed once its
   * consumer acknowledged that sequence (or a later one).
   */
  broadcasts: z.array(z.object({ stream: z.string(), subject: z.string(), seq: z.number().int().positive() })).default([]),
  /**
   * How many times part of the broadcast was published again, into holder streams that did not
   * hold it (restored from a backup taken before it, or made again empty); `broadcasts` names
   * the new sequences there.
   */
  republished: z.number().int().positive().optional(),
  /** How many holders had confirmed when the record was last written (at most once a second while it runs). */
  confirmed: z.number().int().nonnegative().optional(),
  /** Non-secret names of what k+1 is on the provider (role…), recorded on the grant at commit. */
  resource: z.record(z.string(), z.string()).default({}),
  /** W3C traceparent of the rotation's span: every holder's span is its child. */
  traceparent: z.string().optional(),
  /** When each state was entered, in order. */
  history: z.array(z.object({ state: z.string(), at: z.string() })).default([]),
  committedAt: z.string().optional(),
  /**
   * Why it was requested: `manual` (meshctl rotate), `schedule`, or `handover`: the grant moved
   * to a provider with a higher preference, and k+1 is made there.
   */
  trigger: z.enum(["manual", "schedule", "handover"]).default("manual"),
  /**
   * Why the rotation cannot go on by itself, while that holds: `StreamsLost`, the NATS server
   * lost the streams the broadcast goes through and needs a restart (lost-streams.ts). Written by
   * the step that met it, dropped by the next state the rotation enters.
   */
  blocked: z.object({ reason: z.enum(["StreamsLost"]), message: z.string().max(2_048), at: z.string() }).optional(),
  /**
   * For a handover: the provider generation `from` lives on. At commit generation `from` is
   * retired there; the resource there is kept with its data, for the operator to move or drop.
   */
  fromProvider: z.string().optional(),
  /**
   * For a handover of a registry grant: what was stored under it at `fromProvider` (images,
   * packages), carried over to `provider` before the broadcast. Written once the copy is
   * complete; a rotator that died in the middle left none, and its successor's copy skips what
   * is there already (`present`).
   */
  carried: CopyCounts.extend({
    /** Set when nothing could be copied, and why (the old provider's adapter cannot list what it holds). */
    skipped: z.string().optional(),
  }).optional(),
  /**
   * For a handover of a registry grant, while its copy runs: how far the run under way has
   * come, `bytes` counting the blob it is streaming; written after its first artifact or
   * piece of a blob, then at most once a second. Dropped when the copy completes (`carried`
   * then says what it did); after a rotator died in the middle, the last one it wrote stays
   * until its successor's copy writes its own.
   */
  carrying: CopyCounts.extend({
    /** The artifact under way (`blob agent@sha256:…`, `manifest agent:1.0`, `package lib@1.0.0`), while one is. */
    artifact: z.string().optional(),
  }).optional(),
  /**
   * The `requestId` of the rotate request that started it: a request sent again with the same
   * id (a retry after a lost reply or a refusal marked retryable) is answered with this
   * rotation, never with a second one or an "already running" about itself.
   */
  requestId: z.string().optional(),
  /**
   * A revocation (`meshctl revoke`, for a leak): generation `from` is retired `graceMs` after
   * the request was staged (the rotation's deadline) whether or not every holder confirmed; holders that had not are locked out
   * until they take `to`. Who asked, and why, is recorded.
   */
  revoke: z
    .object({
      graceMs: z.number().int().nonnegative().max(MAX_TIMER_MS),
      reason: z.string().max(1_024).optional(),
      by: z.string().max(200).optional(),
      /** The generation a rotation running when the revoke came had staged: superseded, it is retired at the commit too. */
      supersedes: z.number().int().positive().optional(),
    })
    .optional(),
});
export type Rotation = z.infer<typeof Rotation>;

/** Request on `subjects.rotate`: start rotating a grant. */
export const RotateRequest = z.object({
  /** `<module>/<requirement>`. */
  grant: z.string(),
  /** How long holders have to confirm before the rotation is `Stalled`; default the rotator's (5 min). */
  timeoutMs: z.number().int().positive().max(MAX_TIMER_MS).optional(),
  trigger: z.enum(["manual", "schedule", "handover"]).optional(),
  /**
   * Makes the request idempotent: a random id the sender keeps across its retries of one
   * request. The rotation it started is recorded with it ({@link Rotation.requestId}).
   */
  requestId: z
    .string()
    .regex(/^[A-Za-z0-9_-]{8,64}$/, { message: "must be 8-64 letters, digits, _ or -" })
    .optional(),
  /** Revoke instead of rotate: the current generation stops working `graceMs` after the new one goes out, confirmed or not. */
  revoke: z.object({ graceMs: z.number().int().nonnegative().max(MAX_TIMER_MS), reason: z.string().max(1_024).optional(), by: z.string().max(200).optional() }).optional(),
});
export type RotateRequest = z.infer<typeof RotateRequest>;

/** Reply to a rotate request: the rotation as recorded, or an error (a running one is named in it). */
/**
 * Request on `mesh.api.evict` (the operator's): commit the grant's running (or Stalled) rotation
 * without `holders` (holder ids as the record names them), which never came back. Their old
 * generation is retired at the commit like everyone's; an SDK instance's registration is
 * removed, so later rotations do not wait for it until it registers again.
 */
export const EvictRequest = z.object({
  grant: z.string(),
  holders: z.array(z.string().max(200)).min(1).max(1_000),
});
export type EvictRequest = z.infer<typeof EvictRequest>;

export const RotateReply = z.discriminatedUnion("ok", [
  z.object({ ok: z.literal(true), rotation: Rotation }),
  z.object({ ok: z.literal(false), error: z.object({ code: z.string(), message: z.string(), retryable: z.boolean() }) }),
]);
export type RotateReply = z.infer<typeof RotateReply>;

/**
 * The broadcast of a rotation, one message in each holder stream that has holders of the grant
 * (holder-streams.ts): rotation `rotation` moves the grant from `from` to `to`. Each holder
 * gets it on its own durable consumer, takes `to` (from `values`, or fetched sealed to itself
 * from the provisioner), applies it, and only then acknowledges the message: that ack is its
 * confirmation. Nothing in it is readable without a key. Carries the rotation's trace context in its headers.
 */
export const RotationBroadcast = z.object({
  rotation: z.string(),
  grant: z.string(),
  module: z.string(),
  requirement: z.string(),
  kind: z.enum(KIND_LIST),
  provider: z.string(),
  from: z.number().int().positive(),
  to: z.number().int().positive(),
  publishedAt: z.string(),
  /**
   * In a part's stream: k+1's values, encrypted under the part's rotation key
   * (part-rotation-key.ts), which its instances got with their first credential; an instance
   * without it, or for which they do not open, fetches k+1 instead.
   */
  values: z.object({ alg: z.literal("aes-256-gcm"), keyId: z.string(), iv: z.string(), tag: z.string(), data: z.string() }).optional(),
});
export type RotationBroadcast = z.infer<typeof RotationBroadcast>;

/** An SDK holder instance (KV `mesh-holders`, key `<module>.<requirement>.<node>.<part>.<instance>`). */
export const HolderRegistration = z.object({
  holder: z.string(),
  grant: z.string(),
  node: z.string(),
  part: z.string(),
  instance: z.string(),
  registeredAt: z.string(),
  /** Refreshed while the instance runs; one not seen for {@link HOLDER_STALE_MS} is not asked to confirm. */
  seenAt: z.string(),
  /** The instance's public curve25519 xkey (what its fetched credentials are sealed to). */
  xkey: z.string().optional(),
});
export type HolderRegistration = z.infer<typeof HolderRegistration>;

/** How often an SDK holder refreshes its registration. */
export const HOLDER_HEARTBEAT_MS = 30_000;
/** An SDK registration older than this is considered gone when a rotation starts. */
export const HOLDER_STALE_MS = 3 * HOLDER_HEARTBEAT_MS;

/** The id of the rotation of `grant` to generation `to`. */
export function rotationId(grant: string, to: number): string {
  return `${grant}#${to}`;
}

/** Parses a rotation id into its grant and target generation; undefined when it is not one. */
export function parseRotationId(id: string): { grant: string; to: number } | undefined {
  const m = /^([^#]+)#(\d+)$/.exec(id);
  if (!m) return undefined;
  return { grant: m[1]!, to: Number(m[2]) };
}

/** Holder id of an SDK instance: `<node>/<part>/<instance>`. */
export function sdkHolderId(node: string, part: string, instance: string): string {
  return `${node}/${part}/${instance}`;
}

/** Splits a holder id into node, part and (for an SDK instance) instance. */
export function parseHolderId(id: string): { node: string; part: string; instance?: string } | undefined {
  const [node, part, instance, ...rest] = id.split("/");
  if (!node || !part || rest.length) return undefined;
  return instance === undefined ? { node, part } : { node, part, instance };
}

/** True while a rotation still has work to do (not `Committed`). */
/** True while holder `p` of a rotation has neither confirmed nor been evicted. */
export function isHolderPending(p: Rotation["holders"][string]): boolean {
  return p.c === undefined && p.e === undefined;
}

export function isRotationRunning(r: Rotation | undefined): r is Rotation {
  return r !== undefined && r.state !== RotationStates.Committed;
}
