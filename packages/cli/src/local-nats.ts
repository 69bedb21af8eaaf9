/**
 * The all-in-one's NATS: use the server at the URL when one answers, otherwise start a local
 * `nats-server` with JetStream (only for a loopback URL; a remote server is not ours to start).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { accessSync, constants, closeSync, readFileSync } from "node:fs";
import { connect as tcpConnect, createServer } from "node:net";
import { delimiter, join } from "node:path";
import { CliError } from "./cli-error.js";
import { makePrivateDir, openPrivateLog } from "./private-tree.js";

/** Where `nats-server` is looked for besides `PATH` (Debian installs it in /usr/sbin). */
export const NATS_SERVER_CANDIDATES = ["/usr/sbin/nats-server", "/usr/local/sbin/nats-server", "/usr/local/bin/nats-server", "/usr/bin/nats-server"];

/** The path of an executable `nats-server` (`NATS_SERVER_BIN`, then PATH, then the usual places), or undefined. */
export function findNatsServer(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const candidates = [
    ...(env.NATS_SERVER_BIN ? [env.NATS_SERVER_BIN] : []),
    ...(env.PATH ?? "")
      .split(delimiter)
      .filter(Boolean)
      .map((d) => join(d, "nats-server")),
    ...NATS_SERVER_CANDIDATES,
  ];
  for (const c of candidates) {
    try {
      accessSync(c, constants.X_OK);
      return c;
    } catch {
      // not there
    }
  }
  return undefined;
}

/** Host and port of a single loopback NATS URL, or undefined for anything else. */
export function loopbackAddress(url: string): { host: string; port: number } | undefined {
  if (url.includes(",")) return undefined;
  let u: URL;
  try {
    u = new URL(url.includes("://") ? url : `nats://${url}`);
  } catch {
    return undefined;
  }
  const host = u.hostname.replace(/^\[|\]$/g, "");
  if (!["127.0.0.1", "localhost", "::1"].includes(host)) return undefined;
  return { host: host === "localhost" ? "127.0.0.1" : host, port: u.port ? Number(u.port) : 4222 };
}

/** A TCP port free on `host` now (for a server's monitoring port). */
export function freeTcpPort(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once("error", reject);
    srv.listen(0, host, () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}

/** True when nothing listens on `host:port` now (it could be bound). */
export function isTcpPortFree(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.once("error", () => resolve(false));
    srv.listen(port, host, () => srv.close(() => resolve(true)));
  });
}

/** A nats-server this process started. */
export interface StartedNats {
  pid: number;
  url: string;
  storeDir: string;
  logFile: string;
  /** SIGTERM, then SIGKILL after `graceMs`; resolves when it has exited. */
  stop(graceMs?: number): Promise<void>;
  /** SIGKILL at once, synchronously (for process exit). */
  killNow(): void;
}

function waitForTcp(host: string, port: number, proc: ChildProcess, logFile: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  return new Promise((resolve, reject) => {
    const tail = () => {
      try {
        return readFileSync(logFile, "utf8").trim().split("\n").slice(-5).join("\n");
      } catch {
        return "";
      }
    };
    const onExit = (code: number | null) =>
      reject(new CliError(`nats-server exited (code ${code}) before it listened on ${host}:${port}. Last lines of ${logFile}:\n${tail()}`));
    proc.once("exit", onExit);
    const attempt = () => {
      const s = tcpConnect(port, host);
      s.once("connect", () => {
        s.destroy();
        proc.off("exit", onExit);
        resolve();
      });
      s.once("error", () => {
        s.destroy();
        if (Date.now() > deadline) {
          proc.off("exit", onExit);
          reject(new CliError(`nats-server did not listen on ${host}:${port} within ${timeoutMs / 1000} s; see ${logFile}`));
        } else setTimeout(attempt, 100);
      });
    };
    attempt();
  });
}

/**
 * Starts `nats-server -a HOST -p PORT -js -sd STORE` in its own process group (so a Ctrl-C
 * in the terminal reaches meshctl, which stops the services before the server), with its
 * output in `logFile` (0600). Resolves once it accepts connections.
 *
 * The server runs under umask 077, so what it writes (the JetStream store, the resolver's JWTs,
 * its pid file) is closed to other local users: nats-server makes its directories 0750 and its
 * files 0640, which the umask narrows to 0700 and 0600. A shell sets the umask and `exec`s the
 * server, so the pid is the server's; meshctl's own umask is left alone (its other children,
 * the agents and the hooks they run, keep the user's).
 */
export async function startLocalNats(opts: {
  bin: string;
  host: string;
  port: number;
  storeDir: string;
  logFile: string;
  /** A config file (listen address, store, authentication) instead of the plain flags. */
  configFile?: string;
}): Promise<StartedNats> {
  makePrivateDir(opts.storeDir);
  const fd = openPrivateLog(opts.logFile);
  const args = opts.configFile ? ["-c", opts.configFile] : ["-a", opts.host, "-p", String(opts.port), "-js", "-sd", opts.storeDir];
  const proc = spawn("/bin/sh", ["-c", 'umask 077 && exec "$0" "$@"', opts.bin, ...args], {
    stdio: ["ignore", fd, fd],
    detached: true,
  });
  closeSync(fd);
  await new Promise<void>((resolve, reject) => {
    proc.once("spawn", () => resolve());
    proc.once("error", (e) => reject(new CliError(`cannot start ${opts.bin}: ${e.message}`)));
  });
  await waitForTcp(opts.host, opts.port, proc, opts.logFile, 15_000);
  const exited = new Promise<void>((r) => proc.once("exit", () => r()));
  const running = () => proc.exitCode === null && proc.signalCode === null;
  return {
    pid: proc.pid!,
    url: `nats://${opts.host.includes(":") ? `[${opts.host}]` : opts.host}:${opts.port}`,
    storeDir: opts.storeDir,
    logFile: opts.logFile,
    async stop(graceMs = 5_000) {
      if (!running()) return;
      proc.kill("SIGTERM");
      const t = setTimeout(() => running() && proc.kill("SIGKILL"), graceMs);
      await exited;
      clearTimeout(t);
    },
    killNow() {
      if (running()) proc.kill("SIGKILL");
    },
  };
}
