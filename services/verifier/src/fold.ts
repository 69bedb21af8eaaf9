/**
 * The `Verified` condition of a grant, folded from the verifier's own check and the probes of
 * the agents of its holders' nodes, with what an operator should do in the message. Pure.
 */
import { createHash } from "node:crypto";
import {
  Kinds,
  adminSecretAdvice,
  currentProbes,
  holderKey,
  type CheckFailureReason,
  type CheckResult,
  type Condition,
  type Grant,
  type ProbeResult,
  type RepairPolicy,
} from "@mesh/shared";

/** The part of a grant a check depends on: when it changes, the grant is checked again at once. */
export function verificationBasis(g: Grant): string {
  const basis = {
    generation: g.generation,
    provider: g.provider,
    resource: Object.entries(g.resource).sort(),
    targets: g.targets.map((t) => holderKey(t.node, t.part)).sort(),
    holders: Object.entries(g.holders)
      .map(([h, s]) => [h, s.generation])
      .sort(),
    verify: g.verify ?? null,
    repair: g.repair ?? null,
    // A repair recorded by another service (the provisioner or the rotator repairing a
    // provider's admin secret) is checked at once, so its diagnosis does not outlive it.
    repaired: g.repairs?.at(-1)?.at ?? null,
  };
  return createHash("sha256").update(JSON.stringify(basis)).digest("base64url").slice(0, 22);
}

/** What the operator should do about `reason`, given the repair policy. */
export function advice(
  reason: CheckFailureReason,
  ctx: {
    grant: string;
    generation: number;
    provider: string;
    policy: RepairPolicy;
    rotating?: boolean;
    repairFailed?: string;
    divergedTo?: number;
    kind?: Grant["kind"];
  },
): string {
  const force = `meshctl verify ${ctx.grant} --repair`;
  if (ctx.kind === Kinds.Secret) return adminSecretCheckAdvice(reason, ctx);
  if (reason === "ProviderUnreachable") {
    return `check that provider ${ctx.provider} runs and that its endpoint answers from there (service, listen address, firewall); the verifier checks again by itself`;
  }
  if (ctx.repairFailed) return `the verifier's repair failed (${ctx.repairFailed}); it tries again at the next check`;
  if (ctx.rotating) return `a rotation of ${ctx.grant} is in progress, so the verifier does not repair it now`;
  const what =
    reason === "ResourceMissing"
      ? `re-create it with generation ${ctx.generation}'s credential`
      : `re-apply generation ${ctx.generation}'s credential at the provider`;
  if (ctx.policy === "report") {
    const why =
      reason === "ResourceMissing"
        ? "or find out who removed it"
        : reason === "CredentialDiverged"
          ? `or bring back the provider's data of generation ${ctx.generation}`
          : "or find out who changed the password at the provider";
    return `repair is set to report, so nothing was changed: ${what} with \`${force}\`, ${why}; or set repair: auto on the requirement`;
  }
  return `the verifier will ${what}`;
}

/** {@link advice} for a secret that is a provider's admin password: the message names the server; this says what happens next. */
function adminSecretCheckAdvice(reason: CheckFailureReason, ctx: Parameters<typeof advice>[1]): string {
  if (reason === "ProviderUnreachable") return "make that server run and answer at its endpoint; the verifier checks again by itself";
  if (reason !== "CredentialDiverged" || ctx.divergedTo === undefined)
    return "the mesh cannot log in there to set it; do as said, and the verifier checks again by itself";
  if (ctx.repairFailed) return `the repair failed (${ctx.repairFailed}); it is tried again at the next check`;
  if (ctx.rotating) return `a rotation of ${ctx.grant} is in progress, so the verifier does not repair it now`;
  return adminSecretAdvice({ accepted: ctx.divergedTo, current: ctx.generation }, ctx.grant, ctx.policy);
}

/** Inputs of {@link foldVerified}. */
export interface FoldInput {
  grant: Pick<Grant, "id" | "generation" | "targets" | "provider"> & { kind?: Grant["kind"] };
  verifier: CheckResult;
  probes: Readonly<Record<string, ProbeResult>>;
  now: number;
  policy: RepairPolicy;
  rotating?: boolean;
  /** Set when a repair was tried in this check and failed: why. */
  repairFailed?: string;
}

function list(items: string[]): string {
  if (items.length <= 1) return items.join("");
  return `${items.slice(0, -1).join(", ")} and ${items.at(-1)}`;
}

/**
 * The `Verified` condition:
 * - the verifier's check fails: False with its reason, its message and what to do;
 * - it passes but a current probe fails: False with the probe's reason, naming every failing
 *   node (and part) — a grant that works from the verifier but not where a holder runs is not verified;
 * - all pass: True, `Verified`, naming where it was checked from.
 * Stale probes, probes of another generation and of parts no longer targeted do not count.
 */
export function foldVerified(f: FoldInput): Omit<Condition, "observedAt"> {
  const { grant: g } = f;
  const provider = g.provider ?? "?";
  const ctx = {
    grant: g.id,
    generation: g.generation,
    provider,
    policy: f.policy,
    rotating: f.rotating,
    repairFailed: f.repairFailed,
    ...(g.kind ? { kind: g.kind } : {}),
  };
  if (!f.verifier.ok) {
    const reason = f.verifier.reason ?? "CredentialRejected";
    return {
      type: "Verified",
      status: "False",
      reason,
      message: `${f.verifier.message}; ${advice(reason, { ...ctx, divergedTo: f.verifier.divergedTo })}`,
    };
  }
  const probes = currentProbes(g, f.probes, f.now);
  const failing = probes.filter((p) => !p.probe.ok);
  if (failing.length) {
    const first = failing[0]!.probe.reason ?? "CredentialRejected";
    const where = failing.map((p) => `node ${p.node} (part ${p.part}): ${p.probe.message}`);
    const todo =
      first === "ProviderUnreachable"
        ? `make provider ${provider} reachable from ${list([...new Set(failing.map((p) => `node ${p.node}`))])} (routes, firewall, the address in the provider's endpoint), or place the part elsewhere`
        : `check the values delivered on ${list([...new Set(failing.map((p) => `node ${p.node}`))])}; the agent re-delivers them when the grant's generation changes`;
    return {
      type: "Verified",
      status: "False",
      reason: first,
      message: `generation ${g.generation} logs in from the verifier but not from ${where.join("; ")}; ${todo}`,
    };
  }
  const nodes = [...new Set(probes.map((p) => `${p.node} (${p.part})`))];
  return {
    type: "Verified",
    status: "True",
    reason: "Verified",
    message: `generation ${g.generation} logs in at provider ${provider} from the verifier${nodes.length ? ` and from node ${list(nodes)}` : ""}`,
  };
}

/**
 * Whether a probe result should replace the stored one: it is newer and says something else,
 * or the stored one is older than one probe interval (so it would go stale). Keeps writes to
 * one per holder per probe interval while nothing changes.
 */
export function probeWorthStoring(prev: ProbeResult | undefined, next: ProbeResult): boolean {
  if (!prev) return true;
  const dt = Date.parse(next.observedAt) - Date.parse(prev.observedAt);
  if (!(dt > 0)) return false;
  const same =
    prev.ok === next.ok &&
    prev.reason === next.reason &&
    prev.message === next.message &&
    prev.generation === next.generation &&
    prev.divergedTo === next.divergedTo &&
    prev.intervalMs === next.intervalMs;
  return !same || dt >= next.intervalMs;
}
