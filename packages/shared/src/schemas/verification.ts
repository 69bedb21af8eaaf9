/**
 * What the verifier records and exchanges: the per-requirement policy (how often to check,
 * whether to repair), the outcome of one check from one vantage point (the verifier, or an
 * agent's probe from its node), the verification record of a grant, repair events, probe and
 * verify requests, and agents' reachability reports. See docs/conditions.md, "Verified".
 */
import { z } from "zod";
import { Condition } from "../conditions.js";
import { DURATION_PATTERN, durationAtMost } from "../duration.js";
import { MAX_TIMER_MS } from "../limits.js";
import { ErrorReply } from "./events.js";

/** `verify:` of a requirement: how often the verifier re-checks its grant. */
export const VerifyPolicy = z.strictObject({
  every: z
    .string()
    .regex(DURATION_PATTERN, { message: "must be a duration such as 500ms, 10s, 5m" })
    .refine((s) => !/^0+(\.0+)?(ms|s|m|h|d)$/.test(s), { message: "must be longer than 0" })
    .refine((s) => durationAtMost(s, MAX_TIMER_MS), { message: `must be at most ${MAX_TIMER_MS}ms (about 24 days): it is a timer` })
    .optional()
    .describe("A duration such as 500ms, 30s, 5m, longer than 0 and at most about 24 days; the verifier's MESH_VERIFY_INTERVAL (10s) when left out."),
});
export type VerifyPolicy = z.infer<typeof VerifyPolicy>;

/** `repair:` of a requirement: `auto` (default) repairs drift, `report` only records it. */
export const RepairPolicies = { auto: "auto", report: "report" } as const;
/** The schema of `repair:`. */
export const RepairPolicy = z.enum(["auto", "report"]);
export type RepairPolicy = z.infer<typeof RepairPolicy>;

/** The `Verified` reasons a failed check can carry. */
export const CheckFailureReason = z.enum(["ResourceMissing", "CredentialRejected", "CredentialDiverged", "ProviderUnreachable"]);
export type CheckFailureReason = z.infer<typeof CheckFailureReason>;

/**
 * The outcome of one check from one vantage point. `message` carries no secret and no time,
 * so the same outcome gives the same text (conditions are rewritten only when it changes).
 */
export const CheckResult = z.object({
  ok: z.boolean(),
  /** Set when `ok` is false. */
  reason: CheckFailureReason.optional(),
  message: z.string(),
  /** The generation checked. */
  generation: z.number().int().nonnegative(),
  /** For `CredentialDiverged`: the older generation that the provider accepts. */
  divergedTo: z.number().int().positive().optional(),
  /** ISO time of the check. */
  observedAt: z.string(),
});
export type CheckResult = z.infer<typeof CheckResult>;

/** A probe result as stored in a verification record: a {@link CheckResult} and the probe cadence. */
export const ProbeResult = CheckResult.extend({
  /** The agent's probe interval, so a reader can tell a silent (stale) probe from a current one. */
  intervalMs: z.number().int().positive(),
});
export type ProbeResult = z.infer<typeof ProbeResult>;

/** One repair the verifier made: who, what, when, why, and how it ended. */
export const RepairEvent = z.object({
  /** ISO time the repair started. */
  at: z.string(),
  /** Which verifier instance (`verifier@<host>/<pid>`), or `meshctl verify --repair` through it. */
  by: z.string(),
  /** `recreate` (the resource was missing) or `reapply` (the credential was re-applied). */
  action: z.enum(["recreate", "reapply"]),
  /** The diagnosis that caused it. */
  reason: CheckFailureReason,
  /** The generation whose credential was (re)applied. */
  generation: z.number().int().positive(),
  /** `repaired` (verified afterwards), `failed` (the provider refused), or `unverified` (applied, still failing). */
  outcome: z.enum(["repaired", "failed", "unverified"]),
  /** What was found and done, in words; no secret. */
  message: z.string(),
  /** Whether it was asked for (`meshctl verify --repair`) rather than done by policy. */
  requested: z.boolean().default(false),
});
export type RepairEvent = z.infer<typeof RepairEvent>;

/** How many repair events a grant keeps (the newest). */
export const REPAIR_HISTORY_LIMIT = 20;

/**
 * The verifier's record of a grant (KV `mesh-verifications`, key `<module>.<requirement>`),
 * apart from the grant so that re-checks, which happen every interval, do not rewrite the
 * grant (and wake every service that watches grants); the grant's `Verified` condition is
 * written only when the outcome changes.
 */
export const Verification = z.object({
  /** `<module>/<requirement>`. */
  grant: z.string(),
  /** Digest of the grant fields the last check depended on; a grant change that alters it calls for a check. */
  basis: z.string(),
  /** ISO time of the verifier's last check. */
  checkedAt: z.string(),
  /** The verifier instance that made it. */
  checkedBy: z.string(),
  /** The verifier's own check, from where it runs. */
  verifier: CheckResult,
  /** Agents' probes, by holder `<node>/<part>`. */
  probes: z.record(z.string(), ProbeResult).default({}),
});
export type Verification = z.infer<typeof Verification>;

/**
 * Event on `mesh.probe.report.<node>.<module>.<part>.<requirement>` (core NATS): the agent of
 * `node` logged in with the values delivered to `part` and says how that went.
 */
export const ProbeReport = z.object({
  grant: z.string(),
  node: z.string(),
  part: z.string(),
  result: ProbeResult,
});
export type ProbeReport = z.infer<typeof ProbeReport>;

/** Request on `mesh.probe.request.<node>`: probe now, every grant of the node's parts or only `grant`. */
export const ProbeRequest = z.object({ grant: z.string().optional() });
export type ProbeRequest = z.infer<typeof ProbeRequest>;

/** The agent's reply to a {@link ProbeRequest}: its reports, or why it could not probe. */
export const ProbeReply = z.discriminatedUnion("ok", [
  z.object({ ok: z.literal(true), reports: z.array(ProbeReport) }),
  z.object({ ok: z.literal(false), error: ErrorReply }),
]);
export type ProbeReply = z.infer<typeof ProbeReply>;

/** Request on `mesh.api.verify`: check a grant now (and repair it once, even under `repair: report`, with `repair`). */
export const VerifyRequest = z.object({
  grant: z.string(),
  repair: z.boolean().optional(),
});
export type VerifyRequest = z.infer<typeof VerifyRequest>;

/** The verifier's reply to a {@link VerifyRequest}, or a structured error (grant unknown, not checkable yet). */
export const VerifyReply = z.discriminatedUnion("ok", [
  z.object({
    ok: z.literal(true),
    grant: z.string(),
    /** The grant's `Verified` condition after the check. */
    condition: Condition,
    verification: Verification,
    /** The repair made during this check, if any. */
    repair: RepairEvent.optional(),
  }),
  z.object({ ok: z.literal(false), error: ErrorReply }),
]);
export type VerifyReply = z.infer<typeof VerifyReply>;

/**
 * An agent's view of whether a provider's endpoint answers from its node (KV
 * `mesh-reachability`, key `<node>.<provider>`), written when it changes. The resolver reads
 * it: a requirement whose provider cannot be reached from the node of a part that needs it
 * is `ProviderUnreachable`.
 */
export const ReachabilityRecord = z.object({
  node: z.string(),
  provider: z.string(),
  /** The address tried (`host:port`). */
  address: z.string(),
  reachable: z.boolean(),
  /** Why not, when not reachable. */
  message: z.string(),
  /** When it last changed. */
  since: z.string(),
});
export type ReachabilityRecord = z.infer<typeof ReachabilityRecord>;
