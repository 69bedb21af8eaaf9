/**
 * `meshctl get modules|grants|providers [NAME] [--json]`: one aligned row per record. The exit
 * codes are those of `status`: 3 for a module that has never been processed, and 5 for a grant
 * or provider that does not exist.
 */
import { NAME_RULE, isValidName, parseGrantId } from "@mesh/shared";
import type { Store } from "@mesh/shared/runtime";
import { CliError } from "./cli-error.js";
import { ExitCodes } from "./exit-codes.js";
import { formatGrantRows, formatModuleRows, formatProviderRows } from "./get-format.js";
import { explainAll, grantRows, loadMeshRecords, moduleRows, providerRows } from "./get-report.js";
import type { Output } from "./output.js";
import { meshctlCommand } from "./paths.js";
import { exposureWarnings } from "./status-command.js";
import { formatNotProcessed } from "./status-format.js";
import { checkModuleName, notProcessedError, storedManifest } from "./status-report.js";

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
  now?: Date;
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

/** Prints the table (or `{"<resource>":[…]}`) and returns the exit code. */
export async function runGet(store: Store, opts: GetOptions, out: Output): Promise<number> {
  checkGetName(opts.resource, opts.name);
  const now = opts.now ?? new Date();
  const records = await loadMeshRecords(store);
  const table = { now, color: out.color, ...(out.isTTY ? { width: out.columns } : {}) };
  const warnings = exposureWarnings(store);
  const print = (key: GetResource, rows: readonly unknown[], text: () => string, none: string) => {
    if (opts.json) out.out(JSON.stringify({ [key]: rows, ...(warnings.length ? { warnings } : {}) }, null, 2));
    else {
      for (const w of warnings) out.err(w);
      if (rows.length) out.out(text());
      else out.err(none);
    }
  };

  if (opts.resource === "providers") {
    const rows = providerRows(records).filter((r) => opts.name === undefined || r.name === opts.name);
    if (opts.name !== undefined && rows.length === 0) {
      throw new CliError(
        `provider ${opts.name} does not exist: no Provider document of that name is stored; meshctl get providers lists them`,
        ExitCodes.NotFound,
      );
    }
    print("providers", rows, () => formatProviderRows(rows, table), "no provider");
    return ExitCodes.Ok;
  }

  // A module named, or the module of a grant named, must have been processed: exit 3 as status says.
  const module = opts.name?.split("/")[0];
  if (module !== undefined && !records.modules.some((m) => m.module === module)) {
    const error = notProcessedError(module, await storedManifest(store, module), now);
    if (opts.json) out.out(JSON.stringify({ [opts.resource]: [], error }, null, 2));
    else out.err(formatNotProcessed(error, out.columns).join("\n"));
    return ExitCodes.NotProcessed;
  }
  const explanations = explainAll(records, now);
  if (opts.resource === "modules") {
    const rows = moduleRows(records, explanations).filter((r) => module === undefined || r.name === module);
    print("modules", rows, () => formatModuleRows(rows, table), `no module has been processed yet; apply one with: ${meshctlCommand()} apply -f FILE`);
    return ExitCodes.Ok;
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
  print(
    "grants",
    rows,
    () => formatGrantRows(rows, table),
    opts.name ? `module ${opts.name} declares no requirement` : "no grant: no processed module declares a requirement",
  );
  return ExitCodes.Ok;
}
