/**
 * `meshctl rotate GRANT [--wait] [--timeout DUR] [--request-timeout DUR] [--json]`: asks the
 * rotator to move every holder of a grant to a new generation. With `--wait`, follows the
 * rotation record (a KV watch, no polling) with a live `confirmed N/M holders` line until it
 * is Committed or Stalled. The request is sent again while the rotator does not answer (after
 * 10 s for each attempt) or answers with a retryable refusal, within `--request-timeout`
 * (default 30 s); it carries a request id, so however often it is sent, it starts one rotation.
 */
import { randomBytes } from "node:crypto";
import { ErrorCodes, Grant, RotateReply, Rotation, RotationStates, isRotationRunning, keys, parseGrantId, subjects, validAfterRevocation } from "@mesh/shared";
import { entryJson, readJson, type Store, errorFromReply } from "@mesh/shared/runtime";
import { CliError } from "./cli-error.js";
import { ExitCodes } from "./exit-codes.js";
import { notUnderstood, refusal, requestService } from "./service-request.js";
import type { Output } from "./output.js";
import { retrying, retryPolicy, remainingMs, type RetryPolicy } from "./retry.js";
import { liveLine, watchUntil } from "./live-status.js";
import { findRotation } from "./rotation-records.js";
import { formatOutcome, formatStarted, progressLine, rotationProgress, summarizeRotation } from "./rotation-view.js";

/**
 * How long one attempt waits for the rotator's reply before the request is sent again, with the
 * same request id. A reply can be lost: a rotator reconnecting with a new identity of its own
 * cannot answer a request it received before (the server lets a connection answer only what it
 * received). A resend that meets the rotation still staging waits for it there, so a slow
 * provider costs no second rotation.
 */
export const ROTATE_REQUEST_TIMEOUT_MS = 10_000;
/** With `--wait`, how long past the rotation's deadline meshctl still waits for the rotator to record Stalled. */
export const WAIT_GRACE_MS = 15_000;

export interface RotateOptions {
  /** `<module>/<requirement>`. */
  grant: string;
  /** Follow the rotation until it is Committed or Stalled. */
  wait?: boolean;
  /** How long holders have to confirm before the rotation is Stalled (default: the rotator's, 5 min). */
  timeoutMs?: number;
  json?: boolean;
  /** How long one attempt waits for the rotator's reply; default {@link ROTATE_REQUEST_TIMEOUT_MS}, and never past the policy's deadline. */
  requestTimeoutMs?: number;
  /** How long to keep sending the request while the rotator does not answer or asks for a retry; default 30 s from the start. */
  policy?: RetryPolicy;
  /** With `wait`, how long past the deadline to keep waiting; default {@link WAIT_GRACE_MS}. */
  graceMs?: number;
  /** Holders to commit the running (or Stalled) rotation without, instead of starting one. */
  evict?: string[];
  /** Revoke instead of rotate (`meshctl revoke`): the current generation stops working `graceMs` after the new one goes out, confirmed or not. */
  revoke?: { graceMs: number; reason?: string; by?: string };
}

/** The refusal for a grant that is already rotating, naming the running rotation. */
export function alreadyRotatingError(r: Rotation): CliError {
  const p = rotationProgress(r);
  return new CliError(
    `grant ${r.grant} is already rotating: rotation ${r.id} (generation ${r.from} → ${r.to}) is ${r.state}, ${p.confirmed}/${p.total} holders confirmed.\n` +
      `Wait for it (meshctl rotate ${r.grant} --wait does not start another; use meshctl trace ${r.id} or meshctl status ${r.grant.split("/")[0]}).`,
    ExitCodes.AlreadyRotating,
  );
}

/**
 * Sends the rotate request once; every failure is a {@link CliError} with its own exit code,
 * `retryable` where sending the same request again may succeed: no rotator answers (it may be
 * restarting), no reply in time (the request id makes a resend safe), or a refusal the rotator
 * marks retryable.
 */
async function requestRotation(store: Store, opts: RotateOptions, requestId: string, timeout: number): Promise<Rotation> {
  const id = parseGrantId(opts.grant)!;
  const key = keys.grant(id.module, id.requirement);
  const request = { grant: opts.grant, requestId, ...(opts.timeoutMs ? { timeoutMs: opts.timeoutMs } : {}), ...(opts.revoke ? { revoke: opts.revoke } : {}) };
  const body = await requestService(store.nc, subjects.rotate, request, {
    what: "rotate",
    service: "rotator",
    timeoutMs: timeout,
    ifTimedOut:
      "it may be stuck staging the new generation on the provider (see its log).\n" +
      `The rotation may have started anyway: meshctl status ${id.module} shows it.`,
  });
  const refused = refusal(body, "rotator");
  if (refused) {
    if (errorFromReply(body)?.code === ErrorCodes.Conflict) {
      // Conflict is "already rotating" or "not provisioned yet": the record tells them apart.
      const cur = (await readJson(store.kv.rotations, key, Rotation))?.value;
      // An earlier attempt of this very request started it (its reply was lost): that is the answer.
      if (cur?.requestId === requestId) return cur;
      if (isRotationRunning(cur)) throw alreadyRotatingError(cur);
    }
    throw refused;
  }
  const parsed = RotateReply.safeParse(body);
  if (!parsed.success || !parsed.data.ok) throw notUnderstood("rotator");
  return parsed.data.rotation;
}

/**
 * Follows the record of rotation `r` until it is Committed or Stalled, or `untilMs` passes.
 * `onChange` sees every version of the record. Returns the last version seen and whether it
 * ended by time.
 */
export async function followRotation(
  store: Store,
  r: Rotation,
  untilMs: number,
  onChange: (r: Rotation) => void,
): Promise<{ rotation: Rotation; timedOut: boolean }> {
  const key = keys.grant(r.module, r.requirement);
  const following = await watchUntil(() => store.kv.rotations.watch({ key }), untilMs);
  let last = r;
  try {
    for await (const e of following.watch) {
      if (e.operation !== "PUT") continue;
      const parsed = Rotation.safeParse(entryJson(e));
      if (!parsed.success) continue;
      let cur = parsed.data;
      // A newer rotation replaced the record: ours committed before it (only a committed one is replaced).
      if (cur.id !== r.id) cur = (await findRotation(store, r.id))?.rotation ?? { ...last, state: RotationStates.Committed };
      last = cur;
      onChange(cur);
      if (cur.state === RotationStates.Committed || cur.state === RotationStates.Stalled) break;
      // It cannot go on by itself (the server lost its streams): waiting longer says nothing more.
      if (cur.blocked) break;
    }
  } finally {
    following.stop();
  }
  return { rotation: last, timedOut: following.timedOut() && last.state !== RotationStates.Committed && last.state !== RotationStates.Stalled };
}

/** Refuses (exit 2) an argument that is not a grant id, before anything connects. */
export function checkGrantArg(grant: string): { module: string; requirement: string } {
  const id = parseGrantId(grant);
  if (!id) throw new CliError(`${JSON.stringify(grant)} is not a grant id: give <module>/<requirement>, as meshctl status lists them`, ExitCodes.Usage);
  return id;
}

/**
 * Runs the command. Exit codes: 0 started (or, with `wait`, Committed); 2 not a grant id;
 * 5 no such grant; 6 a rotation of it is already running (named); 7 no rotator answers
 * (with how to start one); 8 (`wait`) Stalled, the missing holders named; 9 (`wait`) no
 * outcome in time; 1 anything else the rotator refused (its message says why).
 */
export async function runRotate(store: Store, opts: RotateOptions, out: Output): Promise<number> {
  const id = checkGrantArg(opts.grant);
  const key = keys.grant(id.module, id.requirement);
  const policy = opts.policy ?? retryPolicy({ option: "--request-timeout" }, out);
  // Checked here too so these answers do not depend on a rotator running; the rotator checks again.
  const before = (await retrying("read the grant", policy, () => readJson(store.kv.grants, key, Grant), { read: true }))?.value;
  if (!before) {
    throw new CliError(
      `grant ${opts.grant} does not exist: module ${id.module} has no requirement ${id.requirement} that the resolver processed; meshctl status lists the grants`,
      ExitCodes.NotFound,
    );
  }
  const running = (await retrying("read the rotation record", policy, () => readJson(store.kv.rotations, key, Rotation), { read: true }))?.value;
  if (opts.evict?.length) return evict(store, opts, running, policy, out);
  // A revocation supersedes a running rotation (the rotator decides which it may).
  if (isRotationRunning(running) && !opts.revoke) throw alreadyRotatingError(running);

  // One id for every attempt of this request: the rotator answers a resend with the rotation it started.
  const requestId = randomBytes(12).toString("base64url");
  const started = await retrying("rotate", policy, () =>
    requestRotation(store, opts, requestId, Math.min(opts.requestTimeoutMs ?? ROTATE_REQUEST_TIMEOUT_MS, remainingMs(policy))),
  );
  if (!opts.wait && !opts.revoke) {
    if (opts.json) out.out(JSON.stringify(summarizeRotation(started), null, 2));
    else out.out([formatStarted(started), `follow it with: meshctl status ${id.module}   or   meshctl trace ${started.id}`].join("\n"));
    return ExitCodes.Ok;
  }

  if (!opts.json) out.out(formatStarted(started));
  const progress = liveLine(out);
  const show = (r: Rotation) => {
    if (!opts.json) progress.show(progressLine(r));
  };
  const until = Date.parse(started.deadline) + (opts.graceMs ?? WAIT_GRACE_MS);
  const { rotation, timedOut } = await followRotation(store, started, until, show);
  progress.done();
  if (rotation.blocked && isRotationRunning(rotation)) {
    throw new CliError(
      `rotation ${rotation.id} cannot go on: ${rotation.blocked.message}. It goes on by itself once that is fixed; meshctl status ${id.module} shows it`,
      ExitCodes.Failure,
    );
  }
  const lockedOut = opts.revoke && rotation.state === RotationStates.Committed ? rotationProgress(rotation).missing : [];
  // A certificate cannot be disabled: the revoked generation stays valid until it expires.
  const validUntil = opts.revoke && before.generation === rotation.from ? validAfterRevocation(before) : undefined;
  if (opts.json)
    out.out(JSON.stringify({ ...summarizeRotation(rotation), ...(opts.revoke ? { lockedOut, ...(validUntil ? { validUntil } : {}) } : {}) }, null, 2));
  else {
    out.out(formatOutcome(rotation, { color: out.color, width: out.columns }).join("\n"));
    if (opts.revoke && rotation.state === RotationStates.Committed) {
      const revoked = validUntil
        ? `generation ${rotation.from} is retired, but a certificate cannot be disabled: it stays valid until ${validUntil}, when it expires (a shorter lifetime shortens this)`
        : `generation ${rotation.from} is revoked at ${rotation.provider}`;
      out.out(
        `${revoked}${lockedOut.length ? `; locked out until they take generation ${rotation.to}: ${lockedOut.join(", ")}` : "; every holder is on generation " + rotation.to}`,
      );
    }
  }
  if (rotation.state === RotationStates.Committed) return ExitCodes.Ok;
  if (rotation.state === RotationStates.Stalled) return ExitCodes.RotationStalled;
  if (timedOut) {
    out.err(
      `meshctl: rotation ${rotation.id} has no outcome ${Math.round((opts.graceMs ?? WAIT_GRACE_MS) / 1000)} s past its deadline ${rotation.deadline}: ` +
        `the rotator may be down or overloaded (see its log). The rotation goes on when it runs; meshctl status ${id.module} shows it.`,
    );
  }
  return ExitCodes.WaitTimedOut;
}

/**
 * `--evict HOLDER…`: commits the grant's running rotation without those holders (they never
 * came back), then follows it to the commit. Exit 0 once committed; 5 when no rotation runs;
 * 2 for a holder it does not have.
 */
async function evict(store: Store, opts: RotateOptions, running: Rotation | undefined, policy: RetryPolicy, out: Output): Promise<number> {
  if (!isRotationRunning(running)) {
    throw new CliError(
      `no rotation of ${opts.grant} is running: --evict commits a running or Stalled rotation without the holders named (meshctl status shows one)`,
      ExitCodes.NotFound,
    );
  }
  const request = { grant: opts.grant, holders: opts.evict! };
  const r = await retrying("evict", policy, async () => {
    const body = await requestService(store.nc, subjects.evict, request, {
      what: "evict",
      service: "rotator",
      timeoutMs: Math.min(ROTATE_REQUEST_TIMEOUT_MS, remainingMs(policy)),
      ifTimedOut: "the holders may have been evicted anyway (meshctl status shows it)",
    });
    const refused = refusal(body, "rotator");
    if (refused) throw refused;
    const parsed = RotateReply.safeParse(body);
    if (!parsed.success || !parsed.data.ok) throw notUnderstood("rotator");
    return parsed.data.rotation;
  });
  // A Stalled rotation commits at the rotator's next look at it, now that nobody is missing.
  let done = r;
  for (const until = Date.now() + 30_000; done.state !== RotationStates.Committed && Date.now() < until;) {
    await new Promise((res) => setTimeout(res, 200));
    done = (await findRotation(store, r.id))?.rotation ?? done;
  }
  if (opts.json) out.out(JSON.stringify(summarizeRotation(done), null, 2));
  else out.out([`evicted ${opts.evict!.join(", ")} from rotation ${r.id}`, ...formatOutcome(done, { color: out.color, width: out.columns })].join("\n"));
  return done.state === RotationStates.Committed ? ExitCodes.Ok : ExitCodes.WaitTimedOut;
}
