/**
 * Classifying one check of a grant: from what the provider's admin connection observed and how
 * logins with the current and older generations went, to one `Verified` reason. Pure.
 */
import type { LoginResult } from "@mesh/providers";
import type { CheckFailureReason } from "@mesh/shared";

/** What observing the resource through the provider's admin connection gave. */
export type Observation =
  | { exists: boolean; details: Record<string, string>; missing?: string[] }
  /** `unreachable`: the provider did not answer; `failed`: it answered but could not be observed (e.g. a wrong admin password). */
  | { error: "unreachable" | "failed"; message: string };

/** Everything one check found, from one vantage point. */
export interface CheckInputs {
  /** `<module>/<requirement>`. */
  grant: string;
  provider: string;
  /** The grant's current generation. */
  generation: number;
  observed: Observation;
  /** Login with the current generation's values. */
  current: LoginResult;
  /** Logins with older generations' values, newest first; tried only when the current one is rejected. */
  older: ReadonlyArray<{ generation: number; result: LoginResult }>;
  /** Where the check ran, for messages: `the verifier`, `node node-b`. */
  from: string;
}

/** The classification: `ok`, or a reason with a message (no secret, no time in it). */
export interface Classification {
  ok: boolean;
  reason?: CheckFailureReason;
  message: string;
  /** For `CredentialDiverged`: the older generation the provider accepts. */
  divergedTo?: number;
}

/**
 * What is missing and what exists, from an observation, for messages: the adapter names what it
 * looked for and did not find; every other detail but notes (`conflict`, `…Login`) is present.
 */
function missingParts(observed: { details: Record<string, string>; missing?: string[] }): string {
  const { details, missing = [] } = observed;
  const isNote = (k: string) => k === "conflict" || k.endsWith("Login");
  const present = Object.keys(details).filter((k) => !isNote(k));
  const what = missing.length ? `its ${missing.join(", ")} ${missing.length > 1 ? "are" : "is"} missing` : "it is missing or incomplete";
  const seen = present.length ? ` (present: ${present.map((k) => `${k} ${details[k]}`).join(", ")})` : "";
  const conflict = details.conflict ? `; ${details.conflict}` : "";
  const login = Object.keys(details)
    .filter((k) => k.endsWith("Login") && details[k] === "disabled")
    .map((k) => `; ${k.slice(0, -"Login".length)} ${details[k.slice(0, -"Login".length)] ?? ""} may not log in`)
    .join("");
  return `${what}${seen}${conflict}${login}`;
}

/**
 * The reason for one check, first rule that matches:
 *
 * 1. the current generation logs in: verified;
 * 2. the provider did not answer (login or admin connection): `ProviderUnreachable`, saying from where;
 * 3. an older generation logs in: `CredentialDiverged`, naming the newest one that does — checked
 *    before "missing" because with alternating login roles the current generation's role may
 *    simply not exist in data restored from before it;
 * 4. the resource or the generation's login identity is gone (observed, or the login said so):
 *    `ResourceMissing` — PostgreSQL with scram reports a missing role as a failed password, so
 *    the observation decides;
 * 5. otherwise the provider rejects the current credential: `CredentialRejected`.
 */
export function classifyCheck(c: CheckInputs): Classification {
  const at = `provider ${c.provider}`;
  if (c.current.ok) {
    return { ok: true, message: `generation ${c.generation} logs in at ${at} from ${c.from}` };
  }
  const observedUnreachable = "error" in c.observed && c.observed.error === "unreachable";
  if (c.current.reason === "unreachable" || (observedUnreachable && c.current.reason !== "rejected")) {
    const why = c.current.reason === "unreachable" ? c.current.message : (c.observed as { message: string }).message;
    return { ok: false, reason: "ProviderUnreachable", message: `${at} cannot be reached from ${c.from}: ${why}` };
  }
  const works = c.older.find((o) => o.result.ok);
  if (works) {
    return {
      ok: false,
      reason: "CredentialDiverged",
      divergedTo: works.generation,
      message: `${at} accepts generation ${works.generation} of ${c.grant}, not the current generation ${c.generation}: its data is older than the grant (a data directory initialised or restored before generation ${c.generation})`,
    };
  }
  if ("exists" in c.observed && !c.observed.exists) {
    return { ok: false, reason: "ResourceMissing", message: `the resource of ${c.grant} at ${at} is gone: ${missingParts(c.observed)}` };
  }
  if (c.current.reason === "missing") {
    return { ok: false, reason: "ResourceMissing", message: `the resource of ${c.grant} at ${at} is gone: ${c.current.message}` };
  }
  const unobserved = "error" in c.observed ? `; the provider could not be observed (${c.observed.message}), so a missing login cannot be told apart` : "";
  return {
    ok: false,
    reason: "CredentialRejected",
    message: `${at} rejects generation ${c.generation} of ${c.grant} from ${c.from}: ${c.current.message}${unobserved}`,
  };
}
