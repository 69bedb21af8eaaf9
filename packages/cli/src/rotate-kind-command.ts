/**
 * `meshctl rotate --kind KIND [--wait] [--timeout DUR] [--json]`: rotates every grant of kind
 * `KIND`, each through the ordinary rotation (`runRotate`: k+1 beside k, every holder
 * confirms, then k is retired). What reissues every `nats.user` identity with the permissions
 * the mesh issues now (its own inbox only, answering requests only where asked), with no holder
 * locked out. A grant already rotating is left to that rotation (it reissues it too).
 */
import { Grant, KIND_LIST, type Kind } from "@mesh/shared";
import { listJson, type Store } from "@mesh/shared/runtime";
import { CliError, isCliError } from "./cli-error.js";
import { ExitCodes } from "./exit-codes.js";
import { bufferOutput, type Output } from "./output.js";
import { runRotate, type RotateOptions } from "./rotate-command.js";

/** Grants rotated at once: each is a handful of requests and a follow; holders confirm in parallel anyway. */
const AT_ONCE = 8;

/** One grant's outcome, as printed (and in `--json`). */
export interface KindRotation {
  grant: string;
  exitCode: number;
  /** What `meshctl rotate GRANT` would have printed, its last line. */
  said: string;
}

/** Refuses (exit 2) a kind the mesh does not know, before anything connects. */
export function checkKindArg(kind: string): Kind {
  if (!(KIND_LIST as readonly string[]).includes(kind))
    throw new CliError(`${JSON.stringify(kind)} is not a kind: give one of ${KIND_LIST.join(", ")}`, ExitCodes.Usage);
  return kind as Kind;
}

/**
 * Runs the command: 0 when every rotation started (with `wait`, committed); otherwise the
 * exit code of the first grant that did not (8 Stalled, 6 already rotating, …), every grant's
 * outcome printed either way.
 */
export async function runRotateKind(store: Store, opts: Omit<RotateOptions, "grant" | "evict" | "revoke"> & { kind: string }, out: Output): Promise<number> {
  const kind = checkKindArg(opts.kind);
  const grants = (await listJson(store.kv.grants, Grant)).map((e) => e.value).filter((g) => g.kind === kind && g.generation > 0);
  if (grants.length === 0) {
    out.out(`no provisioned grant of kind ${kind}: nothing to rotate`);
    return ExitCodes.Ok;
  }
  if (!opts.json) out.out(`rotating ${grants.length} grants of kind ${kind}${opts.wait ? ", waiting for each to commit" : ""}`);
  const results = await rotateEach(
    store,
    grants.map((g) => g.id),
    opts,
    (r) => {
      if (!opts.json) out.out(`${r.grant}: ${r.said}`);
    },
  );
  if (opts.json) out.out(JSON.stringify({ kind, rotations: results }, null, 2));
  const failed = results.filter((r) => r.exitCode !== ExitCodes.Ok);
  if (!opts.json && failed.length)
    out.err(
      `meshctl: ${failed.length} of ${results.length} grants of kind ${kind} did not ${opts.wait ? "commit" : "start a rotation"}: ${failed.map((r) => r.grant).join(", ")}; each line above says why`,
    );
  return failed[0]?.exitCode ?? ExitCodes.Ok;
}

/**
 * Rotates each grant of `grants` (`<module>/<requirement>`) as `meshctl rotate GRANT` would,
 * {@link AT_ONCE} at a time, calling `onDone` as each ends; every outcome, sorted by grant.
 */
export async function rotateEach(
  store: Store,
  grants: readonly string[],
  opts: Omit<RotateOptions, "grant" | "evict" | "revoke">,
  onDone: (r: KindRotation) => void = () => {},
): Promise<KindRotation[]> {
  const results: KindRotation[] = [];
  let next = 0;
  const worker = async () => {
    while (next < grants.length) {
      const grant = grants[next++]!;
      const captured = bufferOutput();
      let exitCode: number;
      try {
        exitCode = await runRotate(store, { ...opts, grant, json: false }, captured);
      } catch (e) {
        exitCode = isCliError(e) ? e.exitCode : ExitCodes.Failure;
        captured.err((e as Error).message);
      }
      const lines = `${captured.stdout}${captured.stderr}`.trim().split("\n");
      const r = { grant, exitCode, said: lines[lines.length - 1] ?? "" };
      results.push(r);
      onDone(r);
    }
  };
  await Promise.all(Array.from({ length: Math.min(AT_ONCE, grants.length) }, worker));
  return results.sort((a, b) => a.grant.localeCompare(b.grant));
}
