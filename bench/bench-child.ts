/**
 * The benchmarks' forked helper processes (holder-process.ts, agent-process.ts), spoken to by
 * request and reply over IPC: the parent holds a {@link BenchChild} per process, the child
 * answers with {@link serveParent}. Each request is `{ id, op, ...body }`, each reply
 * `{ id, result }` or `{ id, error }`; `stop` is answered, then the child exits. A child whose
 * parent is gone (it failed or was stopped) exits too.
 */
import { fork, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

/** A forked helper process (`script`, a module beside this one), spoken to by {@link call}. */
export class BenchChild {
  private next = 0;
  private readonly pending = new Map<number, { resolve(v: unknown): void; reject(e: Error): void }>();
  private exited: string | undefined;
  readonly child: ChildProcess;

  /** Forks `script` (a URL, `new URL("./holder-process.ts", import.meta.url)`); `what` names it in errors. */
  constructor(
    script: URL,
    private readonly what: string,
  ) {
    // Forked with this process's flags (tsx's loader, --expose-gc), so it runs from sources too.
    this.child = fork(fileURLToPath(script), [], { stdio: "inherit" });
    this.child.on("message", (m: { id: number; result?: unknown; error?: string }) => {
      const p = this.pending.get(m.id);
      this.pending.delete(m.id);
      if (m.error !== undefined) p?.reject(new Error(`${this.what}: ${m.error}`));
      else p?.resolve(m.result);
    });
    this.child.on("exit", (code, signal) => {
      this.exited = `${this.what} exited (${code ?? signal})`;
      for (const p of this.pending.values()) p.reject(new Error(this.exited));
      this.pending.clear();
    });
  }

  get pid(): number {
    return this.child.pid!;
  }

  call<T>(op: string, body: Record<string, unknown> = {}): Promise<T> {
    if (this.exited) return Promise.reject(new Error(this.exited));
    const id = this.next++;
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.child.send({ id, op, ...body });
    });
  }

  /** Its resident memory in bytes, or 0 once it is gone. */
  rss(): number {
    return rssOf(this.pid) ?? 0;
  }

  async stop(): Promise<void> {
    if (this.exited) return;
    const gone = new Promise((r) => this.child.once("exit", r));
    await this.call("stop").catch(() => undefined);
    await gone;
  }
}

/** In a child: answers the parent's requests with `handle`; after answering `stop`, exits. */
export function serveParent(handle: (op: string, body: Record<string, unknown>) => Promise<unknown>): void {
  process.on("message", (m: { id: number; op: string } & Record<string, unknown>) => {
    void handle(m.op, m).then(
      (result) => process.send!({ id: m.id, result }, () => m.op === "stop" && process.exit(0)),
      (e: unknown) => process.send!({ id: m.id, error: e instanceof Error ? e.message : String(e) }),
    );
  });
  process.on("disconnect", () => process.exit(1));
}

/** Resident memory of a process in bytes (Linux), or undefined. */
export function rssOf(pid: number): number | undefined {
  try {
    const m = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return m ? Number(m[1]) * 1024 : undefined;
  } catch {
    return undefined;
  }
}

/** CPU time (user + system) a process has used so far, in ms (Linux; 10 ms ticks), or 0 where unreadable. */
export function cpuOf(pid: number): number {
  try {
    // The fields after the command name (which is in parentheses and may hold spaces): utime and stime are the 12th and 13th.
    const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
    return ((Number(f[11]) + Number(f[12])) * 1000) / 100;
  } catch {
    return 0;
  }
}
