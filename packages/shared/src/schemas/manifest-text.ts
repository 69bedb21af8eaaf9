/**
 * A manifest file's text, decoded (YAML or JSON) and validated. Apart from manifest.ts because
 * it loads the YAML parser, which the SDK and the services that never read a file do without.
 */
import { parseAllDocuments } from "yaml";
import { Limits, formatBytes } from "../limits.js";
import { validateDocuments, type ParseResult, type Problem } from "./manifest.js";

/**
 * Parses a manifest file: YAML with one or more documents separated by `---`, or JSON (a
 * single document or an array of documents). Syntax errors are problems like any other.
 */
export function parseManifestText(text: string): ParseResult {
  const bytes = Buffer.byteLength(text, "utf8");
  if (bytes > Limits.manifestBytes) {
    return { ok: false, problems: [{ document: 0, path: "", message: `the file is ${formatBytes(bytes)}; a manifest file may be at most ${formatBytes(Limits.manifestBytes)}: split it` }] };
  }
  const trimmed = text.trimStart();
  if (trimmed.startsWith("{") || trimmed.startsWith("[")) {
    try {
      const value: unknown = JSON.parse(text);
      return validateDocuments(Array.isArray(value) ? value : [value]);
    } catch (e) {
      return { ok: false, problems: [{ document: 0, path: "", message: `not valid JSON: ${(e as Error).message}` }] };
    }
  }
  const docs = parseAllDocuments(text);
  const list = Array.isArray(docs) ? docs : [docs];
  const problems: Problem[] = [];
  const values: unknown[] = [];
  list.forEach((d, i) => {
    for (const err of d.errors) problems.push({ document: i, path: "", message: `not valid YAML: ${err.message.split("\n")[0]}` });
    if (d.errors.length) return;
    try {
      const v: unknown = d.toJS({ maxAliasCount: Limits.yamlAliases });
      if (v !== null && v !== undefined) values.push(v);
    } catch (e) {
      // yaml refuses an alias bomb here ("excessive alias count"): a problem of the file, not a crash.
      problems.push({ document: i, path: "", message: `not accepted as YAML: ${(e as Error).message.split("\n")[0]} (at most ${Limits.yamlAliases} aliases in a document)` });
    }
  });
  if (problems.length) return { ok: false, problems };
  return validateDocuments(values);
}
