/**
 * The frozen admin password (docs/bootstrap.md, "Provider dependencies", docs/conditions.md): a provider
 * whose admin password is a mesh secret (`admin.passwordFile` a binding file of a grant in its
 * `needs`, see {@link adminSecretOf}) runs on a server whose data directory keeps the
 * generation it was initialised with. When the secret moves on while the server keeps an older
 * one, the admin login fails with a bare authentication error. Which generation the server
 * accepts tells the cases apart; this file decides from logins made with each generation the
 * mesh holds, and says it in words. Pure.
 */
import type { RepairPolicy } from "./schemas/verification.js";

/** How one admin login went, with one password (the shape of the adapters' `LoginResult`). */
export type AdminLogin = { ok: true } | { ok: false; reason: "rejected" | "unreachable" | "missing"; message: string };

/** Logins at a provider's server with the generations of its admin secret the mesh holds. */
export interface AdminSecretTrials {
  provider: string;
  endpoint: string;
  /** The secret's grant id, `<module>/<requirement>`. */
  secret: string;
  /** The secret's current generation. */
  current: number;
  /** The generation a running rotation of the secret stages, if one runs. */
  staged?: number;
  /** Logins in the order tried ({@link adminSecretGenerations}); the first accepted one ends them. */
  trials: ReadonlyArray<{ generation: number; result: AdminLogin }>;
}

/** What the server holds, as far as the mesh can tell. */
export type AdminSecretFinding =
  /** It accepts the current generation. */
  | { state: "current"; generation: number }
  /** It accepts the generation a running rotation stages (set there before the holders were told). */
  | { state: "staged"; generation: number }
  /** It accepts another generation than the current one: its data is older (or a rotation set one and never committed). */
  | { state: "diverged"; accepted: number; current: number; message: string }
  /** It accepts none that the mesh holds. */
  | { state: "rejected"; message: string }
  /** It did not answer. */
  | { state: "unreachable"; message: string };

/**
 * The generations to log in with, in order: the current one, the one a running rotation
 * stages, one written ahead by a rotation that never committed (`current + 1`), then every
 * older one down to 1, newest first. All of them: a server may hold the generation it was
 * initialised with however many rotations ago that was.
 */
export function adminSecretGenerations(current: number, staged?: number): number[] {
  const out = [current];
  if (staged !== undefined && staged !== current) out.push(staged);
  if (!out.includes(current + 1)) out.push(current + 1);
  for (let g = current - 1; g >= 1; g--) out.push(g);
  return out;
}

/**
 * What the server holds, from the logins: the first accepted generation decides (current,
 * staged, or diverged: another one, which the message names beside the one the mesh holds); a
 * server that did not answer any is unreachable; one that refused every generation is rejected.
 */
export function classifyAdminSecret(t: AdminSecretTrials): AdminSecretFinding {
  const at = `provider ${t.provider}: the server at ${t.endpoint}`;
  const accepted = t.trials.find((x) => x.result.ok);
  if (accepted) {
    if (accepted.generation === t.current) return { state: "current", generation: accepted.generation };
    if (accepted.generation === t.staged) return { state: "staged", generation: accepted.generation };
    const why =
      accepted.generation < t.current
        ? "its data directory was initialised earlier (or restored from a copy made then)"
        : `a rotation set generation ${accepted.generation} there and never committed it`;
    return {
      state: "diverged",
      accepted: accepted.generation,
      current: t.current,
      message: `${at} accepts generation ${accepted.generation} of ${t.secret}; the mesh holds ${t.current}; ${why}`,
    };
  }
  const unreachable = t.trials.find((x) => !x.result.ok && x.result.reason === "unreachable");
  if (unreachable && !unreachable.result.ok) return { state: "unreachable", message: `${at} cannot be reached: ${unreachable.result.message}` };
  const tried = t.trials.map((x) => x.generation);
  return {
    state: "rejected",
    message:
      `${at} accepts none of the generations of ${t.secret} the mesh holds (${tried.join(", ")}): its admin password was changed outside the mesh, ` +
      `or its data directory was initialised with one the mesh never had; set the admin user's password at the server to generation ${t.current} of ${t.secret} (the file admin.passwordFile names)`,
  };
}

/** What the mesh does about a diverged admin secret under the secret's `repair` policy, or the command that does it. */
export function adminSecretAdvice(f: { accepted: number; current: number }, secret: string, policy: RepairPolicy): string {
  const does = `log in with generation ${f.accepted} and set generation ${f.current} at the server`;
  if (policy === "report") {
    return (
      `repair is set to report on ${secret}, so nothing was changed at the server: run \`meshctl verify ${secret} --repair\` to ${does}, ` +
      `or bring back the server's data of generation ${f.current}; or set repair: auto on that requirement`
    );
  }
  return `the mesh will ${does}, then carry on (repair: auto on ${secret})`;
}
