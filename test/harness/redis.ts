/**
 * A test's own Redis that requires authentication (the machine's server on 6379 lets anyone in
 * as `default`, which proves nothing about admin credentials), with an ACL file, so a restart
 * keeps the users the mesh made. It listens on 127.0.0.1 on a free port and keeps no data on
 * disk. stop() ends only the server it started (by its PID); start() again reuses the port and
 * the ACL file.
 *
 * With `tls`, it listens with TLS alone (`--port 0 --tls-port`), presenting that certificate
 * and asking none of its clients: a client that does not speak TLS gets nothing.
 */
import { execFile, type ChildProcess } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { promisify } from "node:util";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort, waitForPort } from "./ports.js";
import { endProcess, spawnServer } from "./processes.js";
import { writeServerCertificate, type ServerCertificate } from "./server-certificate.js";

export const REDIS_SERVER_BIN = process.env.REDIS_SERVER_BIN || "redis-server";

export interface OwnRedis {
  port: number;
  /** `redis://127.0.0.1:<port>` (`rediss://` with `tls`), as a Provider document's `endpoint`. */
  endpoint: string;
  /** A user with every permission; `default` is off. */
  adminUser: string;
  adminPassword: string;
  /** Starts the server again on the same port and ACL file; no-op if running. */
  start(): Promise<void>;
  /** Stops the server (SIGTERM, SIGKILL after 10 s); removes its directory unless `keepData`. Idempotent. */
  stop(opts?: { keepData?: boolean }): Promise<void>;
  /** With `tls`: presents `cert` from now on (the files replaced, then `CONFIG SET`, which reloads them). */
  presentCertificate(cert: ServerCertificate): Promise<void>;
}

/** Starts a server whose user `admin` has `opts.adminPassword` (default: a fresh one). */
export async function startOwnRedis(opts: { adminPassword?: string; tls?: ServerCertificate } = {}): Promise<OwnRedis> {
  const dir = mkdtempSync(join(tmpdir(), "mesh-redis-"));
  const port = await freePort();
  const adminPassword = opts.adminPassword ?? randomBytes(12).toString("hex");
  const aclFile = join(dir, "users.acl");
  const adminHash = createHash("sha256").update(adminPassword).digest("hex");
  writeFileSync(aclFile, `user default off\nuser admin on #${adminHash} ~* &* +@all\n`);
  let child: ChildProcess | undefined;
  const certFile = join(dir, "server.crt");
  const keyFile = join(dir, "server.key");
  const writeCertificate = (cert: ServerCertificate) => writeServerCertificate(cert, { certFile, keyFile });
  if (opts.tls) writeCertificate(opts.tls);
  const listen = opts.tls
    ? ["--port", "0", "--tls-port", String(port), "--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-auth-clients", "no"]
    : ["--port", String(port)];

  const start = async () => {
    if (child) return;
    const args = [
      ...listen,
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

  const presentCertificate = async (cert: ServerCertificate) => {
    if (!opts.tls) throw new Error("this Redis was started without tls: it presents no certificate");
    writeCertificate(cert);
    // Setting a TLS file reloads the server's certificate; the harness's own call need not verify it.
    const cli = ["--tls", "--insecure", "-h", "127.0.0.1", "-p", String(port), "--user", "admin", "--pass", adminPassword, "--no-auth-warning"];
    const { stdout } = await promisify(execFile)("redis-cli", [...cli, "CONFIG", "SET", "tls-cert-file", certFile, "tls-key-file", keyFile]);
    if (stdout.trim() !== "OK") throw new Error(`redis-cli CONFIG SET tls-cert-file: ${stdout.trim()}`);
  };

  await start();
  return { port, endpoint: `${opts.tls ? "rediss" : "redis"}://127.0.0.1:${port}`, adminUser: "admin", adminPassword, start, stop, presentCertificate };
}
