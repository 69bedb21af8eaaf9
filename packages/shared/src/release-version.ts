/**
 * The version a mesh program reports (`meshctl --version`, a service's `service.version`).
 * A release build bundles each program into one file and bakes the version in
 * (scripts/release.ts defines `MESH_RELEASE_VERSION`), so that a bundle reads no package.json,
 * which it does not have; the source tree's build reads its workspace's.
 */
import { readFileSync } from "node:fs";

declare const MESH_RELEASE_VERSION: string | undefined;

/**
 * The release's version in a release build; otherwise the `version` of the package.json one
 * level above the directory of `moduleUrl` (a workspace's `dist/main.js` or `src/main.ts`: its
 * own package.json). Undefined when that file cannot be read.
 */
export function meshVersion(moduleUrl: string): string | undefined {
  if (typeof MESH_RELEASE_VERSION === "string") return MESH_RELEASE_VERSION;
  try {
    return (JSON.parse(readFileSync(new URL("../package.json", moduleUrl), "utf8")) as { version?: string }).version;
  } catch {
    return undefined;
  }
}
