/**
 * What a release build of meshctl carries inside its one file. scripts/release.ts bundles
 * meshctl and each service into a file of its own and defines `MESH_RELEASE_BUILD` for
 * meshctl's; the source tree's build leaves it undefined and reads these files from the
 * repository instead.
 */

/** The files a release's meshctl carries, each by its path. */
export interface ReleaseBuild {
  /** examples/, by path below it (`shop.yaml`, `providers/postgres.yaml`): what `meshctl example` writes. */
  examples: Record<string, string>;
  /** packages/cli/assets/, by file name (`console.js`): what the web console serves. */
  consoleAssets: Record<string, string>;
}

declare const MESH_RELEASE_BUILD: ReleaseBuild | undefined;

/**
 * Defined in a release build, whose services are the bundles beside meshctl's (paths.ts);
 * undefined in the source tree's build.
 */
export const releaseBuild: ReleaseBuild | undefined = typeof MESH_RELEASE_BUILD === "undefined" ? undefined : MESH_RELEASE_BUILD;
