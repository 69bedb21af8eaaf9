/**
 * A second instance of each control-plane service beside the one `meshctl bootstrap` runs:
 * the same program with the same environment (read from the first instance's /proc, so the
 * same NATS URLs, identity binding, master key and state directory), supervised the way
 * meshctl supervises its own (@mesh/cli's Supervisor: restarted after a crash, with back-off),
 * each marked with SECOND_INSTANCE_ENV so the harness tells the two apart.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Supervisor, type ChildEvent } from "../../packages/cli/src/index.js";
import { SECOND_INSTANCE_ENV, type BootstrappedMesh } from "./bootstrapped-mesh.js";
import { waitFor } from "./wait.js";

export interface SecondInstances {
  /** PID of the second instance of `script` now. */
  pid(script: string): number | undefined;
  /** What happened to them (exits, restarts), in order. */
  events: ChildEvent[];
  stop(): Promise<void>;
}

/** Starts a second instance of each of `scripts` (`resolver`, `provisioner`…) of `mesh`. */
export async function startSecondInstances(mesh: BootstrappedMesh, scripts: readonly string[]): Promise<SecondInstances> {
  const events: ChildEvent[] = [];
  const supervisor = new Supervisor({ onEvent: (e) => events.push(e) });
  for (const script of scripts) {
    const pid = await waitFor(`meshctl's ${script}`, () => mesh.servicePid(script), 30_000);
    const cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").filter(Boolean);
    const env: Record<string, string> = {};
    for (const kv of readFileSync(`/proc/${pid}/environ`, "utf8").split("\0").filter(Boolean)) {
      const i = kv.indexOf("=");
      env[kv.slice(0, i)] = kv.slice(i + 1);
    }
    env[SECOND_INSTANCE_ENV] = "2";
    await supervisor.start({ name: script, script: cmdline[1]!, env, logFile: join(mesh.cwd, ".mesh/logs", `${script}-2.log`) });
  }
  return {
    pid: (script) => supervisor.running().find((r) => r.name === script)?.pid,
    events,
    stop: () => supervisor.stop(),
  };
}
