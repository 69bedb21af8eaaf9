/**
 * `meshctl wait MODULE --for STATE [--timeout DUR] [--json]`: follows the module's record
 * until it is in STATE, derived from its stored manifest. A module with no state yet is waited
 * for too (it may be applied meanwhile); only once the time is up does it fail, with exit 3
 * and the words of `status`. Exit codes: 0 in STATE; 3 no state at the end; 9 another state
 * at the end, the last one named with why.
 */
import type { ModuleState } from "@mesh/shared";
import type { Store } from "@mesh/shared/runtime";
import { ExitCodes } from "./exit-codes.js";
import { liveLine } from "./live-status.js";
import { waitForModules, waitLine, type ModuleTarget, type ModuleWaitResult } from "./module-wait.js";
import type { Output } from "./output.js";
import { formatDurationMs } from "./rotation-view.js";
import { formatNotProcessed } from "./status-format.js";
import { checkModuleName, notProcessedError, storedManifest, type NotProcessedError } from "./status-report.js";
import { wrapText } from "./style.js";

/** How long `wait` and `apply --wait` wait when `--timeout` is not given. */
export const WAIT_TIMEOUT_MS = 120_000;

export interface WaitOptions {
  module: string;
  for: ModuleState;
  /** Default {@link WAIT_TIMEOUT_MS}. */
  timeoutMs?: number;
  json?: boolean;
}

/**
 * Follows `targets` until `untilMs`, showing progress unless `json` (a redrawn line on a
 * terminal, a timed line per change otherwise).
 */
export async function followModules(
  store: Store,
  targets: readonly ModuleTarget[],
  untilMs: number,
  out: Output,
  json: boolean | undefined,
): Promise<{ results: ModuleWaitResult[]; timedOut: boolean }> {
  const progress = liveLine(out, { timestamps: true });
  const outcome = await waitForModules(store, targets, untilMs, (r, all) => {
    if (json) return;
    const settled = all.filter((x) => x.outcome === "met").length;
    // On a terminal one line stands for all of them; in a log each change is its own line.
    progress.show(all.length > 1 && out.isTTY ? `${settled}/${all.length} settled; ${waitLine(r)}` : waitLine(r));
  });
  progress.done();
  return outcome;
}

/**
 * Why the wait for `results` ended without them all met after `timeoutMs`, on standard error (unless `json`),
 * and its exit code: 3 when every module left has no state at all (the words of `status`,
 * saying whether its manifest waits for the resolver), else 9 naming each with what was seen last.
 */
export async function reportTimeout(
  store: Store,
  results: readonly ModuleWaitResult[],
  what: string,
  timeoutMs: number,
  out: Output,
  json?: boolean,
): Promise<{ code: number; errors: NotProcessedError[] }> {
  const left = results.filter((r) => r.outcome !== "met");
  const errors = await Promise.all(left.filter((r) => r.state === null).map(async (r) => notProcessedError(r.module, await storedManifest(store, r.module))));
  const after = formatDurationMs(timeoutMs);
  const lines = left.flatMap((r) => {
    const e = errors.find((x) => x.module === r.module);
    if (e) return [`${r.module} has no state after ${after} (--timeout): ${e.message}`, ...formatNotProcessed(e, out.columns).slice(1)];
    return wrapText(
      `${r.module} is not ${what} after ${after} (--timeout): last seen ${waitLine(r).slice(r.module.length + 1)}; meshctl explain ${r.module} says why`,
      out.columns,
    );
  });
  // With --json the JSON says it all, on standard output.
  if (!json) out.err(lines.map((l, i) => (i === 0 ? `meshctl: ${l}` : l)).join("\n"));
  return { code: errors.length === left.length ? ExitCodes.NotProcessed : ExitCodes.WaitTimedOut, errors };
}

/** Runs the command; see the file's comment for the exit codes. */
export async function runWait(store: Store, opts: WaitOptions, out: Output): Promise<number> {
  checkModuleName(opts.module);
  const timeoutMs = opts.timeoutMs ?? WAIT_TIMEOUT_MS;
  const { results, timedOut } = await followModules(store, [{ module: opts.module, accept: [opts.for] }], Date.now() + timeoutMs, out, opts.json);
  const r = results[0]!;
  if (r.outcome === "met") {
    if (opts.json) out.out(JSON.stringify({ for: opts.for, timedOut: false, ...r }, null, 2));
    else out.out(`${opts.module} is ${opts.for}`);
    return ExitCodes.Ok;
  }
  const { code, errors } = await reportTimeout(store, results, opts.for, timeoutMs, out, opts.json);
  if (opts.json) out.out(JSON.stringify({ for: opts.for, timedOut, ...r, ...(errors[0] ? { error: errors[0] } : {}) }, null, 2));
  return code;
}
