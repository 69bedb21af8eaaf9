/**
 * Waiting for modules to reach a state, for `meshctl wait` and `meshctl apply --wait`: the
 * module records are followed with a KV watch (no polling). A record counts only once it was
 * derived from the module's stored manifest (or a newer one), so a state left from before an
 * apply is never taken for the outcome of that apply.
 */
import { ModuleStates, ModuleStatus, type ModuleState } from "@mesh/shared";
import { entryJson, retryJetStreamGap, type Store } from "@mesh/shared/runtime";
import { CliError } from "./cli-error.js";
import { ExitCodes } from "./exit-codes.js";
import { watchUntil } from "./live-status.js";
import { printable } from "./style.js";

/** Every state a module record can have, in the order they are listed. */
export const MODULE_STATE_LIST = Object.values(ModuleStates) as ModuleState[];

/** `--for`'s value as a module state (any case); anything else is wrong usage (exit 2), listing the states. */
export function parseModuleState(value: string, option = "--for"): ModuleState {
  const found = MODULE_STATE_LIST.find((s) => s.toLowerCase() === value.toLowerCase());
  if (!found) throw new CliError(`${option}: ${JSON.stringify(value)} is not a module state; give one of ${MODULE_STATE_LIST.join(", ")}`, ExitCodes.Usage);
  return found;
}

/** One module waited for. */
export interface ModuleTarget {
  module: string;
  /** States that end the wait for it. */
  accept: readonly ModuleState[];
  /** States that end the wait at once as failed, in a record written after {@link freshAfter}. */
  failOn?: readonly ModuleState[];
  /**
   * The KV revision of the manifest the record must be derived from (or a newer one). Left
   * out: the revision stored when the record is read, so a manifest applied meanwhile counts.
   */
  manifestRevision?: number;
  /**
   * A failing state counts only in a record whose own revision is above this one (the modules
   * bucket's last revision before the apply): an older record may predate a Provider applied with it.
   */
  freshAfter?: number;
}

/** What was seen of a module: its record (with the record's own revision) and its stored manifest's revision. */
export interface ModuleSeen {
  status?: ModuleStatus;
  recordRevision?: number;
  /** The revision of the stored manifest; undefined when none is stored. */
  manifestRevision?: number;
}

export type Verdict = "met" | "failed" | "waiting";

/** Where a module stands against its target, and why in a few words. Pure. */
export function judge(t: ModuleTarget, seen: ModuleSeen): { verdict: Verdict; why: string } {
  const s = seen.status;
  const wanted = t.manifestRevision ?? seen.manifestRevision;
  if (!s) {
    return {
      verdict: "waiting",
      why: seen.manifestRevision === undefined ? "no manifest of it is stored" : "its manifest is stored, the resolver has not processed it yet",
    };
  }
  const state = `${s.state}${s.message ? `: ${printable(s.message)}` : ""}`;
  if (wanted !== undefined && s.manifestRevision < wanted) {
    return {
      verdict: "waiting",
      why: `the resolver has not processed manifest revision ${wanted} yet (last state, of revision ${s.manifestRevision}: ${state})`,
    };
  }
  if (t.accept.includes(s.state)) return { verdict: "met", why: state };
  const fresh = t.freshAfter === undefined || (seen.recordRevision ?? 0) > t.freshAfter;
  if (t.failOn?.includes(s.state) && fresh) return { verdict: "failed", why: state };
  return { verdict: "waiting", why: state };
}

/** The `--json` form of where a module ended. Fields may be added, never renamed. */
export interface ModuleWaitResult {
  module: string;
  outcome: Verdict;
  /** The last state seen; null when the module has none. */
  state: ModuleState | null;
  message: string | null;
  since: string | null;
  /** The manifest revision that state was derived from. */
  processedRevision: number | null;
  /** The manifest revision stored; null when none is. */
  manifestRevision: number | null;
  /** Why it ended there, in a few words. */
  why: string;
}

/** The result entry of `t` as `seen`. Pure. */
export function waitResult(t: ModuleTarget, seen: ModuleSeen): ModuleWaitResult {
  const { verdict, why } = judge(t, seen);
  return {
    module: t.module,
    outcome: verdict,
    state: seen.status?.state ?? null,
    message: seen.status?.message ?? null,
    since: seen.status?.since ?? null,
    processedRevision: seen.status?.manifestRevision ?? null,
    manifestRevision: t.manifestRevision ?? seen.manifestRevision ?? null,
    why,
  };
}

/** `shop Pending: waiting for db`, the line a module's progress shows. */
export function waitLine(r: ModuleWaitResult): string {
  return r.state === null || r.processedRevision === null || (r.manifestRevision !== null && r.processedRevision < r.manifestRevision)
    ? `${r.module}: ${r.why}`
    : `${r.module} ${r.why}`;
}

/** The revision of the manifest of `module` stored now; undefined when none is. */
export async function manifestRevisionOf(store: Store, module: string): Promise<number | undefined> {
  const e = await retryJetStreamGap(() => store.kv.manifests.get(module));
  return e && e.operation === "PUT" && e.length > 0 ? e.revision : undefined;
}

/** The modules bucket's last revision: records above it were written after now. 0 when it cannot be read. */
export async function modulesRevisionNow(store: Store): Promise<number> {
  try {
    const status = await store.kv.modules.status();
    return status.streamInfo.state.last_seq;
  } catch {
    // Without the stream's info every record counts as fresh: a failing state ends the wait.
    return 0;
  }
}

/**
 * Follows the records of every target until each is met, one has failed, or `untilMs` passes.
 * `onChange` sees each target's result whenever what was seen of it changes (and once at the
 * start). Returns the last results, in the targets' order, and whether time ran out.
 */
export async function waitForModules(
  store: Store,
  targets: readonly ModuleTarget[],
  untilMs: number,
  onChange: (r: ModuleWaitResult, all: readonly ModuleWaitResult[]) => void,
): Promise<{ results: ModuleWaitResult[]; timedOut: boolean }> {
  const seen = new Map<string, ModuleSeen>(targets.map((t) => [t.module, {}]));
  const byName = new Map(targets.map((t) => [t.module, t]));
  const results = () => targets.map((t) => waitResult(t, seen.get(t.module)!));
  const finished = () => {
    const all = results();
    return all.some((r) => r.outcome === "failed") || all.every((r) => r.outcome === "met");
  };
  const refresh = async (module: string, next: Omit<ModuleSeen, "manifestRevision">) => {
    const t = byName.get(module)!;
    const manifestRevision = t.manifestRevision ?? (await manifestRevisionOf(store, module));
    seen.set(module, { ...next, ...(manifestRevision !== undefined ? { manifestRevision } : {}) });
    const all = results();
    onChange(
      all.find((r) => r.module === module)!,
      all,
    );
  };
  // One key is watched alone; several through all of them (nats-server 2.9 watches one filter).
  const following = await watchUntil(() => store.kv.modules.watch({ key: targets.length === 1 ? targets[0]!.module : ">" }), untilMs);
  try {
    // The watch delivers nothing for a key that has no value: those are shown now.
    for (const t of targets) {
      const e = await retryJetStreamGap(() => store.kv.modules.get(t.module));
      if (!e || e.operation !== "PUT" || e.length === 0) await refresh(t.module, {});
    }
    if (!finished()) {
      for await (const e of following.watch) {
        if (!byName.has(e.key)) continue;
        if (e.operation !== "PUT" || e.length === 0) {
          await refresh(e.key, {});
        } else {
          const parsed = ModuleStatus.safeParse(entryJson(e));
          if (!parsed.success) continue;
          await refresh(e.key, { status: parsed.data, recordRevision: e.revision });
        }
        if (finished()) break;
      }
    }
  } finally {
    following.stop();
  }
  return { results: results(), timedOut: following.timedOut() && !finished() };
}
