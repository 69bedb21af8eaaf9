/**
 * A test's own Redis that requires authentication (the machine's server on 6379 lets anyone in
 * as `default`, which proves nothing about admin credentials), with an ACL file, so a restart
 * keeps the users the mesh made. It listens on 127.0.0.1 on a free port and keeps no data on
 * disk. stop() ends only the server it started (by its PID); start() again reuses the port and
 * the ACL file.
 */
import type { ChildProcess } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort, waitForPort } from "./ports.js";
import { endProcess, spawnServer } from "./processes.js";

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

/** Starts a server whose user `admin` has `opts.adminPassword` (default: a fresh one). */
export async function startOwnRedis(opts: { adminPassword?: string } = {}): Promise<OwnRedis> {
  const dir = mkdtempSync(join(tmpdir(), "mesh-redis-"));
  const port = await freePort();
  const adminPassword = opts.adminPassword ?? randomBytes(12).toString("hex");
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
    child = await spawnServer(REDIS_SERVER_BIN, args, "install redis-server or set REDIS_SERVER_BIN", (proc) => {
      if (child === proc) child = undefined;
    });
    await waitForPort(port);
  };

  const stop = async (opts: { keepData?: boolean } = {}) => {
    await endProcess(child, 10_000);
    child = undefined;
    if (!opts.keepData) rmSync(dir, { recursive: true, force: true });
  };

  await start();
  return { port, endpoint: `redis://127.0.0.1:${port}`, adminUser: "admin", adminPassword, start, stop };
}
