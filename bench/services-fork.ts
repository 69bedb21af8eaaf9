/**
 * Forks bench/services-process.ts: services of the mesh in a process of their own, started
 * and stopped over IPC, with the pid to read its RSS from.
 */
import { fork } from "node:child_process";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import type { BenchService } from "./services-process.js";

export interface ForkedServices {
  pid: number;
  /** performance.now() when the loaded process was told to start its services. */
  startedAt: number;
  /** The process's resident set size now, in bytes (from /proc). */
  rss(): number;
  stop(): Promise<void>;
}

/**
 * Starts `services` (default the resolver and the provisioner) in a forked process; resolves
 * once they run. The process first loads (imports the mesh), and only then is told to start,
 * so `startedAt` (performance.now() when it was told) times the services' start alone.
 */
export async function forkServices(opts: {
  url: string;
  masterKeyHex: string;
  env?: Record<string, string>;
  services?: BenchService[];
  agent?: { node: string; bindingsRoot: string };
}): Promise<ForkedServices> {
  const child = fork(fileURLToPath(new URL("./services-process.ts", import.meta.url)), [], { stdio: "inherit" });
  const reply = (what: string) =>
    new Promise<void>((resolve, reject) => {
      const onExit = (code: number | null) => reject(new Error(`the services process exited (${code}) before it was ${what}`));
      child.once("exit", onExit);
      child.once("message", () => (child.off("exit", onExit), resolve()));
    });
  await reply("loaded");
  const ready = reply("ready");
  const startedAt = performance.now();
  child.send({
    op: "start",
    url: opts.url,
    masterKey: opts.masterKeyHex,
    env: opts.env ?? {},
    ...(opts.services ? { services: opts.services } : {}),
    ...(opts.agent ? { agent: opts.agent } : {}),
  });
  await ready;
  return {
    pid: child.pid!,
    startedAt,
    rss() {
      const kb = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${child.pid}/status`, "utf8"))?.[1];
      return Number(kb ?? 0) * 1024;
    },
    async stop() {
      if (child.exitCode !== null) return;
      const gone = new Promise((r) => child.once("exit", r));
      child.send({ op: "stop" });
      await gone;
    },
  };
}
