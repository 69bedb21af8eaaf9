/**
 * A test's own Redis that requires authentication (the machine's server on 6379 lets anyone in
 * as `default`, which proves nothing about admin credentials), with an ACL file, so a restart
 * keeps the users the mesh made. It listens on 127.0.0.1 on a free port and keeps no data on
 * disk. stop() ends only the server it started (by its PID); start() again reuses the port and
 * the ACL file.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { once } from "node:events";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort, waitForPort } from "./ports.js";

export const REDIS_SERVER_BIN = process.env.REDIS_SERVER_BIN || "redis-server";

export interface OwnRedis {
  port: number;
  /** `redis://127.0.0.1:<port>`, as a Provider document's `endpoint`. */
  endpoint: string;
  /** A user with every permission; `default` is off. */
  adminUser: string;
  adminPassword: string;
  /** Starts the server again on the same port and ACL file; no-op if running. */
  start(): Promise<void>;
  /** Stops the server (SIGTERM, SIGKILL after 10 s); removes its directory unless `keepData`. Idempotent. */
  stop(opts?: { keepData?: boolean }): Promise<void>;
}

export async function startOwnRedis(): Promise<OwnRedis> {
  const dir = mkdtempSync(join(tmpdir(), "mesh-redis-"));
  const port = await freePort();
  const adminPassword = randomBytes(12).toString("hex");
  const aclFile = join(dir, "users.acl");
  const adminHash = createHash("sha256").update(adminPassword).digest("hex");
  writeFileSync(aclFile, `user default off\nuser admin on #${adminHash} ~* &* +@all\n`);
  let child: ChildProcess | undefined;

  const start = async () => {
    if (child) return;
    const args = [
      "--port",
      String(port),
      "--bind",
      "127.0.0.1",
      "--save",
      "",
      "--appendonly",
      "no",
      "--dir",
      dir,
      "--aclfile",
      aclFile,
      "--logfile",
      join(dir, "redis.log"),
    ];
    const proc = spawn(REDIS_SERVER_BIN, args, { stdio: "ignore" });
    child = proc;
    proc.once("exit", () => {
      if (child === proc) child = undefined;
    });
    await new Promise<void>((resolve, reject) => {
      proc.once("error", (e) => reject(new Error(`cannot run ${REDIS_SERVER_BIN} (${e.message}); install redis-server or set REDIS_SERVER_BIN`)));
      proc.once("spawn", resolve);
    });
    await waitForPort(port);
  };

  const stop = async (opts: { keepData?: boolean } = {}) => {
    const proc = child;
    if (proc && proc.exitCode === null) {
      const exited = once(proc, "exit");
      proc.kill("SIGTERM");
      const timer = setTimeout(() => proc.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(timer);
    }
    child = undefined;
    if (!opts.keepData) rmSync(dir, { recursive: true, force: true });
  };

  await start();
  return { port, endpoint: `redis://127.0.0.1:${port}`, adminUser: "admin", adminPassword, start, stop };
}
