/** Ending a server a harness started, by its own ChildProcess: never a process found by name. */
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";

/** Sends SIGTERM to `proc` if it still runs, SIGKILL after `graceMs`, and resolves once it exited. */
export async function endProcess(proc: ChildProcess | undefined, graceMs: number): Promise<void> {
  if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
  const exited = once(proc, "exit");
  proc.kill("SIGTERM");
  const timer = setTimeout(() => proc.kill("SIGKILL"), graceMs);
  await exited;
  clearTimeout(timer);
}

/**
 * Starts `bin` with `args` (no output kept) and resolves once it runs; `onExit` is called when it
 * ends. A binary that cannot be run rejects with `advice` (what to install, or which variable to set).
 */
export async function spawnServer(bin: string, args: string[], advice: string, onExit: (proc: ChildProcess) => void): Promise<ChildProcess> {
  const proc = spawn(bin, args, { stdio: "ignore" });
  proc.once("exit", () => onExit(proc));
  await new Promise<void>((resolve, reject) => {
    proc.once("error", (e) => reject(new Error(`cannot run ${bin} (${e.message}); ${advice}`, { cause: e })));
    proc.once("spawn", resolve);
  });
  return proc;
}
