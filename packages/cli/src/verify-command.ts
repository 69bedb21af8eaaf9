/**
 * `meshctl verify GRANT [--repair] [--json]`: asks the verifier to check a grant now (its
 * holders' agents probe too) and prints the outcome. With `--repair`, a grant found drifted is
 * repaired once even when its requirement says `repair: report`.
 */
import { VerifyReply, describeLastCheck, isMeshError, lastCheck, parseGrantId, subjects } from "@mesh/shared";
import { errorFromReply, requestJson, type NatsConnection } from "@mesh/shared/runtime";
import { CliError } from "./cli-error.js";
import { remainingMs, retrying, retryPolicy, type RetryPolicy } from "./retry.js";
import { ExitCodes } from "./exit-codes.js";
import type { Output } from "./output.js";
import { makeStyle, wrapText } from "./style.js";
import { ageOf } from "./status-format.js";
import { requestSubject } from "./operator-identity.js";

/** How long meshctl waits for the verifier: a check, agents' probes (3 s) and maybe a repair. */
export const VERIFY_TIMEOUT_MS = 30_000;

/** Inputs of {@link runVerify}. */
export interface VerifyOptions {
  /** `<module>/<requirement>`. */
  grant: string;
  repair?: boolean;
  json?: boolean;
  now?: () => Date;
  /** How long one attempt waits for the verifier; default {@link VERIFY_TIMEOUT_MS}. */
  timeoutMs?: number;
  /** How long to keep asking while the verifier does not answer or asks for a retry (a check is safe to ask for again). */
  policy?: RetryPolicy;
}

/** The text form of a verify reply. Pure. */
export function formatVerify(reply: Extract<VerifyReply, { ok: true }>, opts: { now: Date; color?: boolean; width?: number }): string {
  const s = makeStyle(opts.color ?? false);
  const c = reply.condition;
  const width = opts.width ?? 80;
  const status = c.status === "True" ? s.ok(c.status) : s.bad(c.status);
  const lines = [`${s.bold(reply.grant)}  Verified ${status}  ${c.reason}`];
  lines.push(...wrapText(c.message, width, "  "));
  const v = reply.verification;
  // The record keeps probes of current holders only, so its keys are the targets that count.
  const targets = Object.keys(v.probes).map((h) => ({ node: h.slice(0, h.indexOf("/")), part: h.slice(h.indexOf("/") + 1) }));
  const last = lastCheck({ generation: v.verifier.generation, targets }, v, opts.now.getTime());
  lines.push(`  ${describeLastCheck(c.status === "True", last, opts.now.getTime())}`);
  for (const [holder, p] of Object.entries(v.probes).sort(([a], [b]) => a.localeCompare(b))) {
    const [node, part] = holder.split("/");
    lines.push(
      `  node ${node} (part ${part}): ${p.ok ? s.ok("logs in") : s.bad(p.reason ?? "fails")}, generation ${p.generation}, ${ageOf(p.observedAt, opts.now)}`,
    );
  }
  if (reply.repair) {
    const r = reply.repair;
    lines.push(...wrapText(`${r.outcome === "repaired" ? "repaired" : `repair ${r.outcome}`}: ${r.message} (by ${r.by})`, width, "  "));
  }
  return lines.join("\n");
}

/**
 * Runs the command; returns 0 when the grant is verified, 4 when it was checked and is not,
 * 2 for a malformed grant id, 1 when the verifier cannot answer (with what to start).
 */
export async function runVerify(connect: () => Promise<NatsConnection>, opts: VerifyOptions, out: Output): Promise<number> {
  if (!parseGrantId(opts.grant)) {
    throw new CliError(`${JSON.stringify(opts.grant)} is not a grant id: give <module>/<requirement>, as meshctl status lists them`, ExitCodes.Usage);
  }
  const nc = await connect();
  const policy = opts.policy ?? retryPolicy({}, out);
  const timeoutMs = opts.timeoutMs ?? VERIFY_TIMEOUT_MS;
  const raw = await retrying("verify", policy, async () => {
    let body: unknown;
    try {
      body = await requestJson(
        nc,
        requestSubject(nc, subjects.verify),
        { grant: opts.grant, ...(opts.repair ? { repair: true } : {}) },
        { service: "verifier", timeoutMs: Math.min(timeoutMs, remainingMs(policy)) },
      );
    } catch (e) {
      if (isMeshError(e))
        throw new CliError(`${e.message}${e.code === "Unavailable" ? " (meshctl up runs one)" : ""}`, ExitCodes.Failure, { cause: e, retryable: e.retryable });
      throw e;
    }
    const refused = errorFromReply(body);
    if (refused) throw new CliError(refused.message, ExitCodes.Failure, { cause: refused, retryable: refused.retryable });
    return body;
  });
  const parsed = VerifyReply.safeParse(raw);
  if (!parsed.success || !parsed.data.ok) throw new CliError(`the verifier's reply is not a verify reply`, ExitCodes.Failure);
  const reply = parsed.data;
  if (opts.json) {
    const { ok: _ok, ...rest } = reply;
    out.out(JSON.stringify(rest, null, 2));
  } else {
    out.out(formatVerify(reply, { now: (opts.now ?? (() => new Date()))(), color: out.color, width: out.columns }));
  }
  return reply.condition.status === "True" ? ExitCodes.Ok : ExitCodes.NotVerified;
}
