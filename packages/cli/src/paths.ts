/**
 * Where the mesh's files are: the programs `meshctl up` starts, found from meshctl's own file
 * (never from the working directory or the repository's layout), and the all-in-one's state
 * directory.
 */
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { join, resolve } from "node:path";
import { DEFAULT_STATE_DIR, StateFiles, errorMessage, meshVersion, type ControlPlaneService } from "@mesh/shared";
import { CliError } from "./cli-error.js";
import { releaseBuild } from "./release-build.js";

/** A program meshctl up starts: a service of the control plane, or the agent of a node. */
export type ServiceProgram = ControlPlaneService | "agent";

/**
 * Each program's entry point in the source tree's build, by Node's package resolution from this
 * file: the `main` export of its workspace package, a dependency of this one. Written out, not
 * built from the name, so that each package meshctl depends on is named in its source.
 */
const PACKAGE_MAINS: Record<ServiceProgram, () => string> = {
  resolver: () => import.meta.resolve("@mesh/resolver/main"),
  provisioner: () => import.meta.resolve("@mesh/provisioner/main"),
  verifier: () => import.meta.resolve("@mesh/verifier/main"),
  rotator: () => import.meta.resolve("@mesh/rotator/main"),
  agent: () => import.meta.resolve("@mesh/agent/main"),
};

/** The file name of a program's bundle in a release: `meshctl.mjs`, and `mesh-<service>.mjs` beside it. */
export function bundleFileOf(program: "meshctl" | ServiceProgram | "oci-token-issuer"): string {
  return program === "meshctl" ? "meshctl.mjs" : `mesh-${program}.mjs`;
}

/**
 * The entry point of service `name`, checked to exist: in a release build the bundle beside
 * meshctl's own file ({@link bundleFileOf}); in the source tree's build the `main` export of
 * package `@mesh/<name>`, built by `tsc -b`. Throws a CliError that says which is missing and
 * how to repair the installation.
 */
export function serviceMain(name: ServiceProgram): string {
  if (releaseBuild) {
    const file = fileURLToPath(new URL(bundleFileOf(name), import.meta.url));
    if (existsSync(file)) return file;
    const version = meshVersion(import.meta.url) ?? "X.Y.Z";
    throw new CliError(
      `meshctl cannot start the ${name}: ${file} is missing. A release's meshctl starts each service from the bundle beside its own file ` +
        `(${bundleFileOf("meshctl")} beside ${bundleFileOf("resolver")}, ${bundleFileOf("agent")}, …). Install the release again: ` +
        `npm install -g mesh-meshctl-${version}.tgz, or unpack mesh-bundles-${version}.tar.gz whole, keeping its files together (deploy/README.md, section 1).`,
    );
  }
  let file: string;
  try {
    file = fileURLToPath(PACKAGE_MAINS[name]());
  } catch (e) {
    throw new CliError(
      `meshctl cannot find the ${name}'s program, the main entry of package @mesh/${name}: ${errorMessage(e)}. ` +
        "In the repository, install and build every package with: npm ci. An installed meshctl is a release's: install it again (deploy/README.md, section 1).",
      undefined,
      { cause: e },
    );
  }
  if (!existsSync(file)) throw new CliError(`the services are not built (missing ${file}); build them with: npm run build`);
  return file;
}

/**
 * How a user runs service `name` alone, for hints: in a release build, node with its bundle's
 * path; in the source tree, its build's path from the repository's root.
 */
export function serviceCommand(name: ServiceProgram): string {
  return releaseBuild ? `node ${fileURLToPath(new URL(bundleFileOf(name), import.meta.url))}` : `node services/${name}/dist/main.js`;
}

/** How a user runs meshctl here, for what it says to run next: `meshctl` from a release, `npx meshctl` in the repository. */
export function meshctlCommand(): string {
  return releaseBuild ? "meshctl" : "npx meshctl";
}

/** Paths of the all-in-one under its state directory (default `.mesh` in the working directory). */
export interface UpPaths {
  state: string;
  logs: string;
  bindings: string;
  masterKey: string;
}

/** The all-in-one's paths; relative inputs are taken from `cwd`. */
export function upPaths(opts: { cwd?: string; state?: string; bindings?: string; masterKeyFile?: string } = {}): UpPaths {
  const cwd = opts.cwd ?? process.cwd();
  const state = resolve(cwd, opts.state ?? DEFAULT_STATE_DIR);
  return {
    state,
    logs: join(state, StateFiles.logs),
    bindings: resolve(cwd, opts.bindings ?? join(state, StateFiles.bindings)),
    masterKey: resolve(cwd, opts.masterKeyFile ?? join(state, StateFiles.masterKey)),
  };
}
