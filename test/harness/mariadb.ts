/**
 * A test's own MariaDB: a data directory made by `mariadb-install-db` in a temporary directory,
 * its own `mariadbd` on a free port and socket. The machine's server on 3306 lets root in without
 * a password, which proves nothing about admin credentials, and a test that sets its root's
 * password back to an older one must not touch a server others use.
 *
 * Root has `adminPassword` (mysql_native_password) and logs in as `root@localhost` only: the
 * other root accounts the installer makes (`127.0.0.1`, `::1`, the host's name) are dropped, so
 * no password-less way in is left. stop() ends only the server it started (by its PID);
 * start() again reuses the port and the data directory.
 *
 * With `tls`, it presents that certificate and refuses TCP clients without TLS
 * (`require_secure_transport`); its socket, which the harness uses itself, stays open.
 */
import { execFile, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { writeServerCertificate, type ServerCertificate } from "./server-certificate.js";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import mysql from "mysql2/promise";
import { freePort, waitForPort } from "./ports.js";
import { endProcess, spawnServer } from "./processes.js";
import { waitFor } from "./wait.js";

const run = promisify(execFile);

export const MARIADBD_BIN = process.env.MARIADBD_BIN || (existsSync("/usr/sbin/mariadbd") ? "/usr/sbin/mariadbd" : "mariadbd");
export const MARIADB_INSTALL_DB_BIN = process.env.MARIADB_INSTALL_DB_BIN || "mariadb-install-db";

export interface OwnMariadb {
  port: number;
  /** `mysql://127.0.0.1:<port>`, as a Provider document's `endpoint`. */
  endpoint: string;
  adminUser: "root";
  /** Root's password as initialised (the caller's, when it gave one). */
  adminPassword: string;
  /** The data directory: copy it while stopped to restore an older state. */
  dataDir: string;
  /** A connection as root over TCP with `password`, for the test's own checks and changes. */
  connect(password: string): Promise<mysql.Connection>;
  /** Starts the server again on the same port and data directory; no-op if running. */
  start(): Promise<void>;
  /** Stops the server (SIGTERM, SIGKILL after 15 s); removes its directory unless `keepData`. Idempotent. */
  stop(opts?: { keepData?: boolean }): Promise<void>;
  /** With `tls`: presents `cert` from now on (the files replaced, then `FLUSH SSL`, which reloads them). */
  presentCertificate(cert: ServerCertificate): Promise<void>;
}

/** Initialises a data directory whose root has `adminPassword` and starts a server on it. */
export async function startOwnMariadb(opts: { adminPassword: string; tls?: ServerCertificate }): Promise<OwnMariadb> {
  const dir = mkdtempSync(join(tmpdir(), "mesh-mariadb-"));
  const dataDir = join(dir, "data");
  const socket = join(dir, "mariadb.sock");
  const pidFile = join(dir, "mariadb.pid");
  const port = await freePort();
  try {
    await run(MARIADB_INSTALL_DB_BIN, [
      "--no-defaults",
      `--datadir=${dataDir}`,
      "--auth-root-authentication-method=normal",
      "--skip-test-db",
      `--user=${user()}`,
    ]);
  } catch (e) {
    rmSync(dir, { recursive: true, force: true });
    throw new Error(
      `cannot initialise a MariaDB data directory with ${MARIADB_INSTALL_DB_BIN} (${(e as Error).message}); install mariadb-server or set MARIADB_INSTALL_DB_BIN`,
      {
        cause: e,
      },
    );
  }
  let child: ChildProcess | undefined;
  const certFile = join(dir, "server.crt");
  const keyFile = join(dir, "server.key");
  if (opts.tls) writeServerCertificate(opts.tls, { certFile, keyFile });
  const tlsArgs = opts.tls ? [`--ssl-cert=${certFile}`, `--ssl-key=${keyFile}`, "--require-secure-transport=ON"] : [];

  const start = async () => {
    if (child) return;
    const args = [
      "--no-defaults",
      `--datadir=${dataDir}`,
      `--port=${port}`,
      "--bind-address=127.0.0.1",
      `--socket=${socket}`,
      `--pid-file=${pidFile}`,
      `--log-error=${join(dir, "error.log")}`,
      `--user=${user()}`,
      "--skip-log-bin",
      "--innodb-buffer-pool-size=16M",
      ...tlsArgs,
    ];
    child = await spawnServer(MARIADBD_BIN, args, "install mariadb-server or set MARIADBD_BIN", (proc) => {
      if (child === proc) child = undefined;
    });
    try {
      await waitForPort(port, 30_000);
    } catch (e) {
      const log = existsSync(join(dir, "error.log")) ? readFileSync(join(dir, "error.log"), "utf8").slice(-2_000) : "";
      throw new Error(`the test's own mariadbd did not listen on ${port}: ${(e as Error).message}\n${log}`, { cause: e });
    }
  };

  const stop = async (o: { keepData?: boolean } = {}) => {
    await endProcess(child, 15_000);
    child = undefined;
    if (!o.keepData) rmSync(dir, { recursive: true, force: true });
  };

  await start();
  // mariadbd opens its TCP port a moment before its socket (seen under CI: ECONNREFUSED on the socket right after the port answered).
  const c = await waitFor(
    "the test's own mariadbd to accept connections on its socket",
    () => mysql.createConnection({ socketPath: socket, user: "root" }).catch(() => undefined),
    15_000,
  );
  try {
    const [others] = await c.query<mysql.RowDataPacket[]>("SELECT Host FROM mysql.user WHERE User = 'root' AND Host <> 'localhost'");
    for (const { Host } of others) await c.query("DROP USER 'root'@?", [Host]);
    await c.query("SET PASSWORD FOR 'root'@'localhost' = PASSWORD(?)", [opts.adminPassword]);
  } finally {
    await c.end();
  }
  // The harness's own TCP connections use TLS without verifying: the mesh's connections are what a test checks.
  const connect = (password: string) =>
    mysql.createConnection({ host: "127.0.0.1", port, user: "root", password, ...(opts.tls ? { ssl: { rejectUnauthorized: false } } : {}) });
  const presentCertificate = async (cert: ServerCertificate) => {
    if (!opts.tls) throw new Error("this MariaDB was started without tls: it presents no certificate");
    writeServerCertificate(cert, { certFile, keyFile });
    const c = await mysql.createConnection({ socketPath: socket, user: "root", password: opts.adminPassword });
    try {
      await c.query("FLUSH SSL");
    } finally {
      await c.end();
    }
  };
  return {
    port,
    endpoint: `mysql://127.0.0.1:${port}`,
    adminUser: "root",
    adminPassword: opts.adminPassword,
    dataDir,
    connect,
    start,
    stop,
    presentCertificate,
  };
}

/** The user mariadbd runs as: this process's (root needs `--user=root` said out loud). */
function user(): string {
  return process.getuid?.() === 0 ? "root" : (process.env.USER ?? "mysql");
}
