/**
 * The all-in-one's child processes: start each service with its log file, restart one that
 * exits unexpectedly (with back-off), give up on one that keeps failing at start, and stop
 * them all in order on shutdown (SIGTERM, then SIGKILL after a grace period).
 *
 * Why restart: the services are stateless and resume from JetStream, so a restart is what
 * systemd's `Restart=on-failure` would do in production too. Why give up: a service that
 * dies within seconds of every start (not built, bad configuration) will not heal by
 * itself, and a mesh without it would only look alive.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { closeSync } from "node:fs";
import { backoffMs, type Backoff } from "@mesh/shared";
import { openPrivateLog } from "./private-tree.js";

/** How long a service that exited waits before it is started again: 1 s, doubling per quick exit in a row, at most 30 s. */
const RESTART_BACKOFF: Backoff = { firstMs: 1_000, maxMs: 30_000 };

/** One service to run. */
export interface ServiceSpec {
  /** Shown in messages: `resolver`, `agent node-a`. */
  name: string;
  /** The script node runs. */
  script: string;
  /** Environment added to meshctl's own. */
  env: Record<string, string>;
  /** Where its standard output and error go (appended; the file is made, or set, 0600). */
  logFile: string;
}

/** Something that happened to a child. */
export type ChildEvent =
  | { type: "exited"; name: string; code: number | null; signal: NodeJS.Signals | null; logFile: string; restartInMs: number }
  | { type: "gave-up"; name: string; logFile: string; quickExits: number };

export interface SupervisorOptions {
  onEvent(e: ChildEvent): void;
  /** An exit this soon after start counts as a failure to start (default 10 s). */
  quickExitMs?: number;
  /** Consecutive failures to start before giving up (default 3). */
  maxQuickExits?: number;
  /** Delay before restart `n` (1-based); default 1 s doubling, at most 30 s. */
  backoffMs?: (n: number) => number;
}

interface Child {
  spec: ServiceSpec;
  proc?: ChildProcess;
  startedAt: number;
  quickExits: number;
  timer?: NodeJS.Timeout;
  exited?: Promise<void>;
}

/** Runs services as child processes of this one; see the file comment for the policy. */
export class Supervisor {
  private readonly children = new Map<string, Child>();
  private stopping = false;

  constructor(private readonly opts: SupervisorOptions) {}

  /** Starts a service; resolves once its process has been spawned. */
  async start(spec: ServiceSpec): Promise<number> {
    const child: Child = { spec, startedAt: 0, quickExits: 0 };
    this.children.set(spec.name, child);
    return this.launch(child);
  }

  /**
   * Stops service `spec.name` (SIGTERM, then SIGKILL after `graceMs`) and starts it again as
   * `spec`, with a fresh failure count; resolves once the new process has been spawned.
   */
  async replace(spec: ServiceSpec, graceMs = 5_000): Promise<number> {
    const old = this.children.get(spec.name);
    if (old) {
      this.children.delete(spec.name); // its exit is no longer ours to restart
      if (old.timer) clearTimeout(old.timer);
      const p = old.proc;
      if (p && p.exitCode === null && p.signalCode === null) {
        p.kill("SIGTERM");
        const t = setTimeout(() => p.exitCode === null && p.signalCode === null && p.kill("SIGKILL"), graceMs);
        await old.exited;
        clearTimeout(t);
      }
    }
    return this.start(spec);
  }

  /** Names and PIDs of the services running now. */
  running(): Array<{ name: string; pid: number }> {
    return [...this.children.values()]
      .filter((c) => c.proc && c.proc.exitCode === null && c.proc.signalCode === null)
      .map((c) => ({ name: c.spec.name, pid: c.proc!.pid! }));
  }

  private launch(child: Child): Promise<number> {
    const fd = openPrivateLog(child.spec.logFile);
    // Own process group: a Ctrl-C in the terminal reaches meshctl alone, which then stops the
    // services once each, in order, before the NATS server.
    const proc = spawn(process.execPath, [child.spec.script], {
      env: { ...process.env, ...child.spec.env },
      stdio: ["ignore", fd, fd],
      detached: true,
    });
    closeSync(fd);
    child.proc = proc;
    child.startedAt = Date.now();
    child.exited = new Promise<void>((resolve) => proc.once("exit", () => resolve()));
    proc.once("exit", (code, signal) => this.onExit(child, proc, code, signal));
    return new Promise((resolve, reject) => {
      proc.once("spawn", () => resolve(proc.pid!));
      proc.once("error", reject);
    });
  }

  private onExit(child: Child, proc: ChildProcess, code: number | null, signal: NodeJS.Signals | null): void {
    if (this.stopping || child.proc !== proc || this.children.get(child.spec.name) !== child) return;
    const quick = Date.now() - child.startedAt < (this.opts.quickExitMs ?? 10_000);
    child.quickExits = quick ? child.quickExits + 1 : 0;
    if (child.quickExits >= (this.opts.maxQuickExits ?? 3)) {
      this.opts.onEvent({ type: "gave-up", name: child.spec.name, logFile: child.spec.logFile, quickExits: child.quickExits });
      return;
    }
    const n = Math.max(1, child.quickExits);
    const delay = this.opts.backoffMs ? this.opts.backoffMs(n) : backoffMs(n, RESTART_BACKOFF);
    this.opts.onEvent({ type: "exited", name: child.spec.name, code, signal, logFile: child.spec.logFile, restartInMs: delay });
    child.timer = setTimeout(() => {
      child.timer = undefined;
      if (!this.stopping) void this.launch(child).catch(() => undefined);
    }, delay);
  }

  /**
   * Stops every service: SIGTERM to each, then SIGKILL to those still running after
   * `graceMs`. Resolves when all have exited. No restarts after this.
   */
  async stop(graceMs = 5_000): Promise<void> {
    this.stopping = true;
    const waits: Array<Promise<void>> = [];
    for (const c of this.children.values()) {
      if (c.timer) clearTimeout(c.timer);
      const p = c.proc;
      if (!p || p.exitCode !== null || p.signalCode !== null) continue;
      p.kill("SIGTERM");
      const t = setTimeout(() => {
        if (p.exitCode === null && p.signalCode === null) p.kill("SIGKILL");
      }, graceMs);
      waits.push(c.exited!.then(() => clearTimeout(t)));
    }
    await Promise.all(waits);
  }

  /** SIGKILL to every running service, synchronously (for an exit that cannot wait). */
  killNow(): void {
    this.stopping = true;
    for (const c of this.children.values()) {
      if (c.timer) clearTimeout(c.timer);
      const p = c.proc;
      if (p && p.exitCode === null && p.signalCode === null) p.kill("SIGKILL");
    }
  }
}
