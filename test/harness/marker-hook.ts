/**
 * A part's `onRotate` hook that waits for the part to say it switched: the agent runs it after
 * writing a rotated credential and confirms only once it exits 0, which it does when the marker
 * `<module>-<part>-g<generation>` appears in its directory (the test's part leaves it once it
 * uses that generation); it gives up after `waitSeconds`. The hook runs as nobody: the directory
 * and the script are readable by all.
 */
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export interface MarkerHook {
  /** The directory of the script and the markers. */
  dir: string;
  /** `NAME=COMMAND`, as an agent's `--allow-hook` takes it. */
  allow(name: string): string;
  /** Says that `module`'s `part` uses `generation` now: its hook exits 0. */
  mark(module: string, part: string, generation: number): void;
  remove(): void;
}

export function markerHook(waitSeconds = 20): MarkerHook {
  const dir = mkdtempSync(join(tmpdir(), "mesh-markers-"));
  chmodSync(dir, 0o755);
  const script = join(dir, "await-marker.sh");
  const tries = Math.ceil(waitSeconds / 0.05);
  writeFileSync(
    script,
    `#!/bin/sh\nfor i in $(seq 1 ${tries}); do [ -f "${dir}/$MESH_MODULE-$MESH_PART-g$MESH_GENERATION" ] && exit 0; sleep 0.05; done; exit 1\n`,
    { mode: 0o755 },
  );
  return {
    dir,
    allow: (name) => `${name}=${script}`,
    mark: (module, part, generation) => writeFileSync(join(dir, `${module}-${part}-g${generation}`), ""),
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}
