/**
 * What a release build of meshctl carries inside its one file. scripts/release.ts bundles
 * meshctl and each service into a file of its own and defines `MESH_RELEASE_BUILD` for
 * meshctl's; the source tree's build leaves it undefined and reads these files from the
 * repository instead.
 */

import { readFileSync } from "node:fs";
import { CliError } from "./cli-error.js";

/** The files a release's meshctl carries, each by its path. */
export interface ReleaseBuild {
  /** examples/, by path below it (`shop.yaml`, `providers/postgres.yaml`): what `meshctl example` writes. */
  examples: Record<string, string>;
  /** packages/cli/assets/, by file name (`console.js`): what the web console serves. */
  consoleAssets: Record<string, string>;
  /** schemas/, by file name (`Manifest.schema.json`): what `meshctl example` writes beside the examples for editors. */
  schemas: Record<string, string>;
}

declare const MESH_RELEASE_BUILD: ReleaseBuild | undefined;

/**
 * Defined in a release build, whose services are the bundles beside meshctl's (paths.ts);
 * undefined in the source tree's build.
 */
export const releaseBuild: ReleaseBuild | undefined = typeof MESH_RELEASE_BUILD === "undefined" ? undefined : MESH_RELEASE_BUILD;

/**
 * The text of a file meshctl carries in a release: `group`'s entry `name` in a release build, else
 * the source tree's file at `source`. Throws, saying how to mend it, when a release lacks it.
 */
export function carriedFile(group: keyof ReleaseBuild, name: string, source: URL): string {
  if (!releaseBuild) return readFileSync(source, "utf8");
  const text = releaseBuild[group][name];
  if (text === undefined) throw new CliError(`this meshctl was built without ${name} (${group}): build the release again with npm run release`);
  return text;
}
