/**
 * A test's own nats-server (Debian's package) with JetStream, on a free port, with a
 * temporary store. The PID recorded is the server's own; stop() ends only that process.
 * Never touches the shared server on 4222.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort, waitForPort } from "./ports.js";

export const NATS_SERVER_BIN = process.env.NATS_SERVER_BIN || "/usr/sbin/nats-server";

export interface NatsServer {
  port: number;
  /** HTTP monitoring port (`/varz`, `/connz`, `/jsz`). */
  monitorPort: number;
  url: string;
  storeDir: string;
  pid: number;
  /** Stops the server (SIGTERM, then SIGKILL) and, unless `keepStore`, removes its store. */
  stop(opts?: { keepStore?: boolean }): Promise<void>;
  /** Kills the server at once (SIGKILL), as a crash would. */
  kill(): Promise<void>;
  /** Starts it again on the same port with the same store. */
  restart(): Promise<void>;
}

/**
 * Writes `text` as the configuration file `path` of a running server that is about to reload
 * it (SIGHUP): into a file beside it, then renamed over it, so a reload reads the old file or
 * the new one whole, never one truncated in the middle of being written.
 *
 * Why: written in place (`writeFileSync` truncates, then writes), nats-server 2.9.10 read it
 * empty during a reload storm on a loaded machine (test/jetstream-gap.test.ts). That reload
 * turned JetStream (and authentication) off, the next one turned them on again, and from then
 * on every stream of the account answered "stream not found" until the server restarted
 * (test/nats-config-reload.test.ts shows it, and why).
 */
export function writeServerConfig(path: string, text: string): void {
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, text, { mode: 0o600 });
  renameSync(tmp, path);
}

export interface StartNatsServerOptions {
  port?: number;
  storeDir?: string;
  /**
   * A configuration file for the server (`-c`), e.g. one with `authorization` and a `pid_file`.
   * Address and ports still come from the harness's flags. JetStream must come from the file,
   * as `jetstream { store_dir: <storeDir> }` (pass that `storeDir` too): nats-server 2.9.10
   * refuses `-sd` beside a file's `store_dir`, cannot reload a config whose store dir came
   * from `-sd`, and turns JetStream off on a reload when only `-js` enabled it.
   */
  configFile?: string;
}

export async function startNatsServer(opts: StartNatsServerOptions = {}): Promise<NatsServer> {
  let port = opts.port ?? (await freePort());
  let monitorPort = await freePort();
  const storeDir = opts.storeDir ?? mkdtempSync(join(tmpdir(), "mesh-nats-"));
  let proc: ChildProcess;

  const launch = async () => {
    const config = opts.configFile ? ["-c", opts.configFile] : ["-js", "-sd", storeDir];
    proc = spawn(NATS_SERVER_BIN, ["-a", "127.0.0.1", "-p", String(port), "-m", String(monitorPort), ...config], {
      stdio: ["ignore", "ignore", "pipe"],
    });
    let stderr = "";
    proc.stderr!.on("data", (d: Buffer) => (stderr = (stderr + d.toString()).slice(-4000)));
    const exited = new Promise<never>((_, reject) =>
      proc.once("exit", (code) => reject(new Error(`nats-server exited (${code}) before listening: ${stderr}`))),
    );
    await Promise.race([waitForPort(port), exited]);
    proc.removeAllListeners("exit");
  };

  const waitExit = (signal: NodeJS.Signals, graceMs: number) =>
    new Promise<void>((resolve) => {
      if (proc.exitCode !== null || proc.signalCode !== null) return resolve();
      const t = setTimeout(() => proc.kill("SIGKILL"), graceMs);
      proc.once("exit", () => (clearTimeout(t), resolve()));
      proc.kill(signal);
    });

  // A free port found here may be taken by another process before the server binds it: the
  // ports it chose are chosen again (a port the caller named is the caller's to give).
  for (let attempt = 1; ; attempt++) {
    try {
      await launch();
      break;
    } catch (e) {
      if (attempt >= 3 || !/address already in use/.test((e as Error).message)) throw e;
      if (opts.port === undefined) port = await freePort();
      monitorPort = await freePort();
    }
  }
  const server: NatsServer = {
    port,
    monitorPort,
    url: `nats://127.0.0.1:${port}`,
    storeDir,
    get pid() {
      return proc.pid!;
    },
    async stop(o = {}) {
      await waitExit("SIGTERM", 5_000);
      if (!o.keepStore) rmSync(storeDir, { recursive: true, force: true });
    },
    async kill() {
      await waitExit("SIGKILL", 0);
    },
    async restart() {
      await launch();
    },
  };
  return server;
}
