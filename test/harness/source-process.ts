/** A process a test starts from the repository's sources (tsx, no build needed), its output kept, and its stop. */
import { spawn, type ChildProcess } from "node:child_process";
import { join } from "node:path";

const repo = join(import.meta.dirname, "../..");
const sources = join(repo, "test/harness/tsconfig.sources.json");

/** A started process and everything it printed so far (the last 20,000 characters on stdout and stderr). */
export interface SourceProcess {
  child: ChildProcess;
  output(): string;
}

/**
 * A process from sources, its output kept (for the failure message) and scanned. Node itself with
 * tsx as its loader, not the tsx command: that one runs node as a child and relays a SIGTERM to
 * it, and when the child does not say within 30 ms that it handles the signal (a loaded machine)
 * it sends the signal again, which a service takes as "exit at once", before its spans are flushed.
 */
export function startProcess(args: string[], env: NodeJS.ProcessEnv): SourceProcess {
  let out = "";
  const child = spawn(process.execPath, ["--import", "tsx", ...args], {
    cwd: repo,
    env: { ...process.env, ...env, TSX_TSCONFIG_PATH: sources },
    stdio: ["ignore", "pipe", "pipe"],
  });
  for (const s of [child.stdout!, child.stderr!]) s.on("data", (d: Buffer) => (out = (out + d.toString()).slice(-20_000)));
  return { child, output: () => out };
}

/** SIGTERM, and SIGKILL when it has not exited 10 s later. */
export async function stopProcess(p: { child: ChildProcess } | undefined): Promise<void> {
  if (!p || p.child.exitCode !== null) return;
  const exited = new Promise<void>((r) => p.child.once("exit", () => r()));
  p.child.kill("SIGTERM");
  await Promise.race([exited, new Promise((r) => setTimeout(r, 10_000))]);
  if (p.child.exitCode === null) p.child.kill("SIGKILL");
}
