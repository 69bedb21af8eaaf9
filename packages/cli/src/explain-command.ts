/** `meshctl explain MODULE [--json]`: why each requirement is or is not satisfied. */
import { Grant, ModuleDoc, ModuleStatus, NodeRecord, ProviderDoc, keys } from "@mesh/shared";
import { listJson, readJson, readJsonIfValid, type Store } from "@mesh/shared/runtime";
import { explainModule, type Explanation } from "./explain.js";
import { formatExplanation } from "./explain-format.js";
import { ExitCodes } from "./exit-codes.js";
import type { Output } from "./output.js";
import { formatNotProcessed } from "./status-format.js";
import { checkModuleName, notProcessedError, storedManifest } from "./status-report.js";

export interface ExplainOptions {
  module: string;
  json?: boolean;
  now?: Date;
}

/** Reads what explain needs for `module`; undefined when it has never been processed. */
export async function loadExplanation(store: Store, module: string, now = new Date()): Promise<Explanation | undefined> {
  checkModuleName(module);
  const status = await readJson(store.kv.modules, module, ModuleStatus);
  if (!status) return undefined;
  const [manifest, grants, providers, nodes] = await Promise.all([
    // One stored under an earlier version's rules is explained from its grants: its state says why.
    readJsonIfValid(store.kv.manifests, module, ModuleDoc),
    listJson(store.kv.grants, Grant, keys.grantsOf(module)),
    listJson(store.kv.providers, ProviderDoc),
    listJson(store.kv.nodes, NodeRecord),
  ]);
  return explainModule({
    status: status.value,
    ...(manifest ? { manifest: { doc: manifest.value, revision: manifest.revision } } : {}),
    grants: grants.map((g) => g.value),
    providers: providers.map((p) => p.value),
    nodes: nodes.map((n) => n.value),
    now,
  });
}

/**
 * Prints the explanation and returns the exit code: 0, or 3 when the module has never been
 * processed (JSON: `{"error":{…}}`), with the same message as `status`.
 */
export async function runExplain(store: Store, opts: ExplainOptions, out: Output): Promise<number> {
  const now = opts.now ?? new Date();
  const explanation = await loadExplanation(store, opts.module, now);
  if (!explanation) {
    const error = notProcessedError(opts.module, await storedManifest(store, opts.module), now);
    if (opts.json) out.out(JSON.stringify({ error }, null, 2));
    else out.err(formatNotProcessed(error, out.columns).join("\n"));
    return ExitCodes.NotProcessed;
  }
  if (opts.json) out.out(JSON.stringify(explanation, null, 2));
  else out.out(formatExplanation(explanation, { color: out.color, width: out.columns }));
  return ExitCodes.Ok;
}
