/**
 * `meshctl status [MODULE] [--json]`: processed modules, their state, and each grant with
 * provider, generation and conditions, read straight from KV.
 */
import type { Store } from "@mesh/shared/runtime";
import { unauthenticatedWarning } from "@mesh/shared/service";
import { ExitCodes } from "./exit-codes.js";
import type { Output } from "./output.js";
import { nameLine } from "./output-format.js";
import { formatStatus } from "./status-format.js";
import { loadStatus } from "./status-report.js";

export interface StatusOptions {
  module?: string;
  json?: boolean;
  /** `-o name`: `module/<name>` for each processed module, one a line. */
  names?: boolean;
  now?: Date;
}

/**
 * The mesh's own exposure, which listings show first: on a server without authentication
 * anyone can take every credential.
 */
export function exposureWarnings(store: Store): string[] {
  const info = store.nc.info;
  return info && !info.auth_required ? [unauthenticatedWarning(store.nc.getServer())] : [];
}

/**
 * Prints the status and returns the exit code: 0, or 3 when `module` has never been
 * processed (then the JSON form is `{"modules":[],"error":{…}}`).
 */
export async function runStatus(store: Store, opts: StatusOptions, out: Output): Promise<number> {
  const now = opts.now ?? new Date();
  const report = await loadStatus(store, opts.module, now);
  const code = report.error ? ExitCodes.NotProcessed : ExitCodes.Ok;
  const warnings = exposureWarnings(store);
  if (opts.json) {
    out.out(JSON.stringify(warnings.length ? { ...report, warnings } : report, null, 2));
    return code;
  }
  for (const w of warnings) out.err(w);
  if (opts.names && !report.error) {
    for (const m of report.modules) out.out(nameLine("module", m.module));
    return code;
  }
  const text = formatStatus(report, { now, color: out.color, width: out.columns });
  if (report.error) out.err(text);
  else out.out(text);
  return code;
}
