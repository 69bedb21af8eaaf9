/**
 * Where the mesh's files are: the services of this installation (found from this file, not
 * from the working directory) and the all-in-one's state directory.
 */
import { fileURLToPath } from "node:url";
import { join, resolve } from "node:path";
import { DEFAULT_STATE_DIR, StateFiles } from "@mesh/shared";

/** The repository root of this installation: `packages/cli/{src,dist}/` → three levels up. */
export function repoRoot(): string {
  return fileURLToPath(new URL("../../../", import.meta.url));
}

/** The entry point of service `name` (`resolver`, `provisioner`, `agent`), built by `tsc -b`. */
export function serviceMain(name: string, root = repoRoot()): string {
  return join(root, "services", name, "dist", "main.js");
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
