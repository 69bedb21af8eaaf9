/**
 * Writing a generated file only when its content changed, and saying so: what `npm run schemas`
 * and `npm run reference` share.
 */
import { readFileSync, writeFileSync } from "node:fs";

/** Writes `content` to `path` unless the file holds it already; prints `created` or `updated` with `shown`. */
export function writeIfChanged(path: string, content: string, shown: string): void {
  let current: string | undefined;
  try {
    current = readFileSync(path, "utf8");
  } catch {
    current = undefined;
  }
  if (current === content) return;
  writeFileSync(path, content);
  console.log(`${current === undefined ? "created" : "updated"} ${shown}`);
}
