/**
 * `meshctl get modules|grants|providers [NAME] [-o json|yaml|wide|name] [-w]`: one aligned row
 * per record, and with `-w` each row again as it changes. The exit codes are those of `status`:
 * 3 for a module that has never been processed, and 5 for a grant or provider that does not exist.
 */
import { KvWatchInclude } from "@nats-io/kv";
import { stringify } from "yaml";
import { NAME_RULE, errorMessage, isValidName, parseGrantId } from "@mesh/shared";
import { retryJetStreamGap, type Store } from "@mesh/shared/runtime";
import { CliError, isCliError } from "./cli-error.js";
import { ExitCodes } from "./exit-codes.js";
import { formatGrantRows, formatModuleRows, formatProviderRows, type TableOptions } from "./get-format.js";
import {
  explainAll,
  grantRows,
  loadMeshRecords,
  moduleRows,
  providerRows,
  type GrantRow,
  type MeshRecords,
  type ModuleRow,
  type ProviderRow,
} from "./get-report.js";
import type { Output } from "./output.js";
import { nameLine } from "./output-format.js";
import { meshctlCommand } from "./paths.js";
import { exposureWarnings } from "./status-command.js";
import { formatNotProcessed } from "./status-format.js";
import { checkModuleName, notProcessedError, storedManifest, type NotProcessedError } from "./status-report.js";

/** What `get` lists. */
export const GetResources = ["modules", "grants", "providers"] as const;
export type GetResource = (typeof GetResources)[number];

/** `modules`, `module` (and the same of the others) as the resource; anything else is wrong usage (exit 2). */
export function parseGetResource(word: string): GetResource {
  const found = GetResources.find((r) => r === word || r === `${word}s`);
  if (!found) throw new CliError(`cannot get ${JSON.stringify(word)}: give one of ${GetResources.join(", ")}`, ExitCodes.Usage);
  return found;
}

export interface GetOptions {
  resource: GetResource;
  /**
   * modules: one module; grants: the grants of one module (`shop`) or one grant (`shop/db`);
   * providers: one provider.
   */
  name?: string;
  json?: boolean;
  /** `-o wide` (more columns) or `-o name` (`<kind>/<name>` lines); `yaml` only with `watch`, which writes each event as it comes. */
  output?: "wide" | "name" | "yaml";
  now?: Date;
  /** `-w`: after the list, print each row again as it changes, until this signal aborts. */
  watch?: AbortSignal;
}

/** Refuses a name that cannot be one of `resource` (exit 2), before anything connects. */
export function checkGetName(resource: GetResource, name: string | undefined): void {
  if (name === undefined) return;
  if (resource === "grants" && name.includes("/")) {
    if (!parseGrantId(name)) throw new CliError(`${JSON.stringify(name)} is not a grant id: give <module>/<requirement>, or a module`, ExitCodes.Usage);
    return;
  }
  if (resource === "providers") {
    if (!isValidName(name)) throw new CliError(`${JSON.stringify(name)} is not a provider name: a name ${NAME_RULE}`, ExitCodes.Usage);
    return;
  }
  checkModuleName(name);
}

type Row = ModuleRow | GrantRow | ProviderRow;

/** How `get` shows the rows of each resource: the word `-o name` and a watch's events use, a row's name, the table. */
const RESOURCES: Record<GetResource, { kind: string; id: (r: Row) => string; table: (rows: Row[], o: TableOptions) => string }> = {
  modules: { kind: "module", id: (r) => (r as ModuleRow).name, table: (rows, o) => formatModuleRows(rows as ModuleRow[], o) },
  grants: { kind: "grant", id: (r) => (r as GrantRow).id, table: (rows, o) => formatGrantRows(rows as GrantRow[], o) },
  providers: { kind: "provider", id: (r) => (r as ProviderRow).name, table: (rows, o) => formatProviderRows(rows as ProviderRow[], o) },
};

/** The rows `opts` asks for as `records` have them, or why there are none to list. */
type Selection = { rows: Row[]; none: string } | { notProcessed: NotProcessedError };

/** Selects the rows of `opts` from `records`; throws (exit 5) for a grant or provider named that does not exist. */
async function select(store: Store, records: MeshRecords, opts: GetOptions, now: Date): Promise<Selection> {
  if (opts.resource === "providers") {
    const rows = providerRows(records).filter((r) => opts.name === undefined || r.name === opts.name);
    if (opts.name !== undefined && rows.length === 0) {
      throw new CliError(
        `provider ${opts.name} does not exist: no Provider document of that name is stored; meshctl get providers lists them`,
        ExitCodes.NotFound,
      );
    }
    return { rows, none: "no provider" };
  }
  // A module named, or the module of a grant named, must have been processed: exit 3 as status says.
  const module = opts.name?.split("/")[0];
  if (module !== undefined && !records.modules.some((m) => m.module === module)) {
    return { notProcessed: notProcessedError(module, await storedManifest(store, module), now) };
  }
  const explanations = explainAll(records, now);
  if (opts.resource === "modules") {
    const rows = moduleRows(records, explanations).filter((r) => module === undefined || r.name === module);
    return { rows, none: `no module has been processed yet; apply one with: ${meshctlCommand()} apply -f FILE` };
  }
  const rows = grantRows(records, explanations).filter(
    (r) => opts.name === undefined || (opts.name.includes("/") ? r.id === opts.name : r.module === opts.name),
  );
  if (opts.name?.includes("/") && rows.length === 0) {
    throw new CliError(
      `grant ${opts.name} does not exist: module ${module} declares no requirement ${opts.name.split("/")[1]}; meshctl get grants ${module} lists its grants`,
      ExitCodes.NotFound,
    );
  }
  return { rows, none: opts.name ? `module ${opts.name} declares no requirement` : "no grant: no processed module declares a requirement" };
}

/** Prints the table (or `{"<resource>":[…]}`, or `<kind>/<name>` lines) and returns the exit code; with `watch`, goes on printing changes. */
export async function runGet(store: Store, opts: GetOptions, out: Output): Promise<number> {
  checkGetName(opts.resource, opts.name);
  // A watch listens before it lists, so that no change between the two is missed.
  const watches = opts.watch ? await openWatches(store) : undefined;
  try {
    return await listRows(store, opts, out, watches);
  } finally {
    for (const w of watches ?? []) w.stop();
  }
}

/** The listing of {@link runGet}; with `watches`, the changes after it too. */
async function listRows(store: Store, opts: GetOptions, out: Output, watches: KvWatch[] | undefined): Promise<number> {
  const now = opts.now ?? new Date();
  const chosen = await select(store, await loadMeshRecords(store), opts, now);
  const warnings = exposureWarnings(store);
  if ("notProcessed" in chosen) {
    const error = chosen.notProcessed;
    if (opts.json) out.out(JSON.stringify({ [opts.resource]: [], error }, null, 2));
    else out.err(formatNotProcessed(error, out.columns).join("\n"));
    return ExitCodes.NotProcessed;
  }
  const { rows, none } = chosen;
  const resource = RESOURCES[opts.resource];
  if (watches) return watchRows(store, opts, out, rows, warnings, watches);
  if (opts.json) {
    out.out(JSON.stringify({ [opts.resource]: rows, ...(warnings.length ? { warnings } : {}) }, null, 2));
    return ExitCodes.Ok;
  }
  for (const w of warnings) out.err(w);
  if (opts.output === "name") for (const r of rows) out.out(nameLine(resource.kind, resource.id(r)));
  else if (rows.length) out.out(resource.table(rows, tableOptions(out, opts, now)));
  else out.err(none);
  return ExitCodes.Ok;
}

function tableOptions(out: Output, opts: GetOptions, now: Date): TableOptions {
  return { now, color: out.color, wide: opts.output === "wide", ...(out.isTTY ? { width: out.columns } : {}) };
}

/** What a watch says of a row: new since the last look, changed, or gone. */
export type WatchEvent = "ADDED" | "MODIFIED" | "DELETED";

/** The rows of `next` that differ from `prev` (by their JSON), and those of `prev` gone from it, in name order. Pure. */
export function rowChanges<R>(prev: ReadonlyMap<string, R>, next: ReadonlyMap<string, R>): Array<{ event: WatchEvent; id: string; row: R }> {
  const changes: Array<{ event: WatchEvent; id: string; row: R }> = [];
  for (const [id, row] of next) {
    const before = prev.get(id);
    if (before === undefined) changes.push({ event: "ADDED", id, row });
    else if (JSON.stringify(before) !== JSON.stringify(row)) changes.push({ event: "MODIFIED", id, row });
  }
  for (const [id, row] of prev) if (!next.has(id)) changes.push({ event: "DELETED", id, row });
  return changes.sort((a, b) => a.id.localeCompare(b.id));
}

/** How long the records may keep changing before a watch looks again: a burst of writes is one look. */
const WATCH_SETTLE_MS = 100;

/**
 * `get -w`: the rows now, then each row again whenever it changes (a record it is built from
 * was written), until `opts.watch` aborts. As a table: the header once, then one aligned row
 * per change (a deleted one marked so); `-o name`: `<kind>/<name>` per change; `-o json|yaml`:
 * one document per event, `{"type":"ADDED"|"MODIFIED"|"DELETED","<kind>":row}` (JSON one a
 * line, YAML separated by `---`), the first ones ADDED.
 */
/** A KV watch, as `kv.watch` opens it. */
type KvWatch = Awaited<ReturnType<Store["kv"]["grants"]["watch"]>>;

/** Watches of every bucket `get`'s rows come from, each telling of any write from now on. */
async function openWatches(store: Store): Promise<KvWatch[]> {
  const buckets = [store.kv.modules, store.kv.grants, store.kv.manifests, store.kv.providers, store.kv.nodes, store.kv.reachability];
  const opened: KvWatch[] = [];
  try {
    for (const kv of buckets) opened.push(await retryJetStreamGap(() => kv.watch({ key: ">", include: KvWatchInclude.UpdatesOnly })));
  } catch (e) {
    for (const w of opened) w.stop();
    throw new CliError(`could not watch the mesh's records (${errorMessage(e)}); run meshctl get -w again once the server answers`, ExitCodes.Failure, {
      cause: e,
    });
  }
  return opened;
}

async function watchRows(store: Store, opts: GetOptions, out: Output, first: Row[], warnings: string[], watches: KvWatch[]): Promise<number> {
  const resource = RESOURCES[opts.resource];
  for (const w of warnings) out.err(w);
  const byId = (rows: Row[]) => new Map(rows.map((r) => [resource.id(r), r]));
  let shown = new Map<string, Row>();
  /** Every row printed as a table row, so that a new one is aligned with them. */
  const printed: Row[] = [];
  const print = (changes: Array<{ event: WatchEvent; id: string; row: Row }>, now: Date) => {
    for (const c of changes) {
      if (opts.json || opts.output === "yaml") {
        const doc = { type: c.event, [resource.kind]: c.row };
        if (opts.json) out.out(JSON.stringify(doc));
        else out.raw(`---\n${stringify(doc)}`);
      } else if (opts.output === "name") out.out(nameLine(resource.kind, c.id));
      else {
        printed.push(c.row);
        const lines = resource.table(printed, tableOptions(out, opts, now)).split("\n");
        const line = lines.at(-1)!;
        out.out(c.event === "DELETED" ? `${line}  (deleted)` : line);
      }
    }
  };
  const table = !opts.json && opts.output !== "yaml" && opts.output !== "name";
  if (table) out.out(resource.table(first, tableOptions(out, opts, opts.now ?? new Date())).split("\n")[0]!);
  print(rowChanges(shown, byId(first)), opts.now ?? new Date());
  shown = byId(first);

  // Any write to a record the rows come from: look again, once the burst has settled.
  const signal = opts.watch!;
  let timer: NodeJS.Timeout | undefined;
  let looking = Promise.resolve();
  const look = () => {
    timer = undefined;
    looking = looking.then(async () => {
      if (signal.aborted) return;
      const now = new Date();
      try {
        const chosen = await select(store, await loadMeshRecords(store), opts, now).catch((e: unknown) =>
          isCliError(e) ? { rows: [], none: "" } : Promise.reject(e),
        );
        // A module named that is no longer processed lists nothing, as a deleted grant does.
        const rows = "rows" in chosen ? chosen.rows : [];
        const next = byId(rows);
        print(rowChanges(shown, next), now);
        shown = next;
      } catch (e) {
        // The store not answering for a moment (a cluster electing a leader): said, and looked at again at the next change.
        out.err(`meshctl: could not read the records (${errorMessage(e)}); the watch goes on and looks again at the next change`);
      }
    });
  };
  // A watch ends by itself only when the connection has closed for good: then nothing more would be printed.
  const ended = new Promise<void>((resolve) => {
    for (const w of watches) {
      void (async () => {
        for await (const _ of w) if (!timer) timer = setTimeout(look, WATCH_SETTLE_MS);
      })()
        .catch(() => undefined)
        .finally(resolve);
    }
  });
  const stopped = new Promise<void>((resolve) => {
    if (signal.aborted) resolve();
    else signal.addEventListener("abort", () => resolve(), { once: true });
  });
  await Promise.race([stopped, ended]);
  if (timer) clearTimeout(timer);
  for (const w of watches) w.stop();
  await looking;
  if (!signal.aborted) {
    throw new CliError("the watch ended: the connection to NATS closed; run meshctl get -w again once the server answers");
  }
  return ExitCodes.Ok;
}
