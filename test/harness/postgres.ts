/**
 * A test's own PostgreSQL with scram-sha-256 authentication, so a wrong password really fails
 * (the machine's shared server on 5432 trusts local connections and proves nothing).
 *
 * `initdb` and `postgres` run as the `postgres` OS user when the tests run as root (PostgreSQL
 * refuses to run as root), in a temporary directory that holds the data directory and the
 * unix socket. The server listens on 127.0.0.1 on a free port. The PID recorded is the
 * postmaster's own; stop() and kill() end only that process (and, for kill, its children).
 * start() again reuses the same data directory and port, so a test can stop a server and
 * bring it back with everything it held.
 *
 * With `tls`, the server presents that certificate and accepts TCP connections over TLS alone
 * (`hostssl` lines only in pg_hba.conf): a client that does not speak TLS is refused, so nothing
 * a test sees can have gone in plain text. The harness's own admin queries use TLS without
 * verifying (the mesh's connections are what a test checks).
 */
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { chownSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { randomBytes } from "node:crypto";
import pg from "pg";
import { freePort } from "./ports.js";
import { waitFor } from "./wait.js";
import { writeServerCertificate, type ServerCertificate } from "./server-certificate.js";

const run = promisify(execFile);

/** Whether `pid` runs (a zombie does not: nothing may reap it in a container without init). */
function isAlive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3) !== "Z";
  } catch {
    return false;
  }
}

export interface Postgres {
  host: string;
  port: number;
  /** `postgres://127.0.0.1:<port>`, as a Provider document's `endpoint`. */
  endpoint: string;
  adminUser: string;
  adminPassword: string;
  /** The temporary directory: data directory, socket and logs live under it. */
  baseDir: string;
  dataDir: string;
  /** The postmaster's PID while running, else undefined. */
  readonly pid: number | undefined;
  /** Runs one statement as the admin (a fresh connection each time) and returns its result (`.rows`). */
  query<R extends pg.QueryResultRow = Record<string, unknown>>(sql: string, params?: unknown[]): Promise<pg.QueryResult<R>>;
  /** Starts the server again on the same port and data directory; resolves when it answers queries. No-op if running. */
  start(): Promise<void>;
  /** Fast shutdown (SIGINT), SIGKILL after 10 s; removes the temporary directory unless `keepData`. Idempotent. */
  stop(opts?: { keepData?: boolean }): Promise<void>;
  /** Kills the postmaster and its children at once (SIGKILL), as a crash would; the data stays. */
  kill(): Promise<void>;
  /** With `tls`: presents `cert` from now on (the files replaced, then a configuration reload), as a renewal on the server would. */
  presentCertificate(cert: ServerCertificate): Promise<void>;
}

/** Directory of the PostgreSQL server binaries: `$PG_BIN`, the newest /usr/lib/postgresql/N/bin, or PATH. */
export function postgresBinDir(): string {
  if (process.env.PG_BIN) return process.env.PG_BIN;
  const root = "/usr/lib/postgresql";
  const versions = existsSync(root)
    ? readdirSync(root)
        .filter((v) => existsSync(join(root, v, "bin", "initdb")))
        .sort((a, b) => Number(b) - Number(a))
    : [];
  if (versions[0]) return join(root, versions[0], "bin");
  for (const dir of (process.env.PATH ?? "").split(":")) {
    if (dir && existsSync(join(dir, "initdb")) && existsSync(join(dir, "postgres"))) return dir;
  }
  throw new Error(
    "PostgreSQL server binaries (initdb, postgres) not found in $PG_BIN, /usr/lib/postgresql/*/bin or PATH; " +
      "install them with `apt-get install -y postgresql` (Debian/Ubuntu) or point PG_BIN at their directory",
  );
}

/** uid/gid to run PostgreSQL as: the `postgres` user when we are root, else ourselves. */
async function runAs(): Promise<{ uid: number; gid: number } | undefined> {
  if (process.getuid?.() !== 0) return undefined;
  try {
    const uid = Number((await run("id", ["-u", "postgres"])).stdout.trim());
    const gid = Number((await run("id", ["-g", "postgres"])).stdout.trim());
    return { uid, gid };
  } catch {
    throw new Error("running as root, but there is no `postgres` OS user to run PostgreSQL as; install the `postgresql` package, which creates it");
  }
}

/** Starts a fresh PostgreSQL; see {@link Postgres}. */
export async function startPostgres(
  opts: {
    adminUser?: string;
    /** The server's max_connections; default 40. */
    maxConnections?: number;
    /** The admin password the data directory is initialised with (a mesh secret's value, say); default a random one. */
    adminPassword?: string;
    /** Serve TLS alone, presenting this certificate. */
    tls?: ServerCertificate;
  } = {},
): Promise<Postgres> {
  const bin = postgresBinDir();
  const user = await runAs();
  const adminUser = opts.adminUser ?? "postgres";
  const adminPassword = opts.adminPassword ?? randomBytes(18).toString("base64url");
  const baseDir = mkdtempSync(join(tmpdir(), "mesh-pg-"));
  const dataDir = join(baseDir, "data");
  if (user) chownSync(baseDir, user.uid, user.gid);

  const pwfile = join(baseDir, "pwfile");
  writeFileSync(pwfile, `${adminPassword}\n`, { mode: 0o600 });
  if (user) chownSync(pwfile, user.uid, user.gid);
  try {
    await run(
      join(bin, "initdb"),
      ["-D", dataDir, "-U", adminUser, "--auth=scram-sha-256", `--pwfile=${pwfile}`, "--encoding=UTF8", "--locale=C", "--no-sync"],
      { ...user, cwd: baseDir, env: { ...process.env, LC_ALL: "C" } },
    );
  } catch (e) {
    rmSync(baseDir, { recursive: true, force: true });
    const err = e as { stderr?: string; message: string };
    throw new Error(`initdb failed: ${err.stderr || err.message}`, { cause: e });
  } finally {
    rmSync(pwfile, { force: true });
  }

  const certFile = join(baseDir, "server.crt");
  const keyFile = join(baseDir, "server.key");
  const writeCertificate = (cert: ServerCertificate) => writeServerCertificate(cert, { certFile, keyFile }, user);
  if (opts.tls) {
    writeCertificate(opts.tls);
    // TCP over TLS alone: with no `host` line, a connection without TLS finds no entry and is refused.
    const hba = ["local all all scram-sha-256", "hostssl all all 127.0.0.1/32 scram-sha-256", "hostssl all all ::1/128 scram-sha-256", ""].join("\n");
    writeFileSync(join(dataDir, "pg_hba.conf"), hba);
    if (user) chownSync(join(dataDir, "pg_hba.conf"), user.uid, user.gid);
  }

  const port = await freePort();
  const host = "127.0.0.1";
  let proc: ChildProcess | undefined;
  let log = "";

  const connect = () =>
    new pg.Client({
      host,
      port,
      user: adminUser,
      password: adminPassword,
      database: "postgres",
      connectionTimeoutMillis: 3_000,
      ...(opts.tls ? { ssl: { rejectUnauthorized: false } } : {}),
    });

  const query: Postgres["query"] = async (sql, params) => {
    const c = connect();
    c.on("error", () => {});
    try {
      await c.connect();
      return await c.query(sql, params);
    } finally {
      await c.end().catch(() => {});
    }
  };

  const exitOf = (p: ChildProcess) =>
    new Promise<void>((resolve) => (p.exitCode !== null || p.signalCode !== null ? resolve() : p.once("exit", () => resolve())));

  const start = async () => {
    if (proc && proc.exitCode === null && proc.signalCode === null) return;
    const args = ["-D", dataDir, "-p", String(port), "-c", `listen_addresses=${host}`, "-c", `unix_socket_directories=${baseDir}`];
    // Small and quick: tests need neither durability against power loss nor many connections.
    args.push("-c", "fsync=off", "-c", "shared_buffers=16MB", "-c", `max_connections=${opts.maxConnections ?? 40}`, "-c", "log_min_messages=warning");
    if (opts.tls) args.push("-c", "ssl=on", "-c", `ssl_cert_file=${certFile}`, "-c", `ssl_key_file=${keyFile}`);
    const p = spawn(join(bin, "postgres"), args, { ...user, cwd: baseDir, stdio: ["ignore", "ignore", "pipe"] });
    proc = p;
    log = "";
    p.stderr!.on("data", (d: Buffer) => (log = (log + d.toString()).slice(-4000)));
    let exited = false;
    void exitOf(p).then(() => (exited = true));
    const deadline = Date.now() + 30_000;
    for (;;) {
      if (exited) throw new Error(`postgres exited (${p.exitCode ?? p.signalCode}) before accepting connections: ${log}`);
      try {
        await query("select 1");
        return;
      } catch (e) {
        // It answers, with another admin password than the first one (a test changed it): up.
        if ((e as { code?: string }).code?.startsWith("28")) return;
        if (Date.now() > deadline) {
          p.kill("SIGKILL");
          throw new Error(`postgres did not accept connections on ${host}:${port} within 30 s (${(e as Error).message}): ${log}`, { cause: e });
        }
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  };

  /** PIDs whose parent is `pid`, from /proc. */
  const childrenOf = (pid: number): number[] =>
    readdirSync("/proc")
      .filter((d) => /^\d+$/.test(d))
      .filter((d) => {
        try {
          // The fields after the command name (which may hold spaces) start with state, ppid.
          const stat = readFileSync(`/proc/${d}/stat`, "utf8");
          return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]) === pid;
        } catch {
          return false;
        }
      })
      .map(Number);

  // A test process that ends without stop() must not leave its server running.
  const onExit = () => {
    if (proc && proc.exitCode === null && proc.signalCode === null) proc.kill("SIGQUIT");
  };
  process.on("exit", onExit);

  await start().catch((e: unknown) => {
    process.off("exit", onExit);
    rmSync(baseDir, { recursive: true, force: true });
    throw e;
  });
  return {
    host,
    port,
    endpoint: `postgres://${host}:${port}`,
    adminUser,
    adminPassword,
    baseDir,
    dataDir,
    get pid() {
      return proc && proc.exitCode === null && proc.signalCode === null ? proc.pid : undefined;
    },
    query,
    start,
    async stop(o = {}) {
      const p = proc;
      if (p) {
        const exited = exitOf(p);
        if (p.exitCode === null && p.signalCode === null) {
          p.kill("SIGINT");
          const t = setTimeout(() => p.kill("SIGKILL"), 10_000);
          await exited;
          clearTimeout(t);
        }
      }
      if (!o.keepData) {
        process.off("exit", onExit);
        rmSync(baseDir, { recursive: true, force: true });
      }
    },
    async presentCertificate(cert) {
      if (!opts.tls) throw new Error("this PostgreSQL was started without tls: it presents no certificate");
      writeCertificate(cert);
      await query("select pg_reload_conf()");
    },
    async kill() {
      const p = proc;
      if (!p || p.exitCode !== null || p.signalCode !== null) return;
      const children = childrenOf(p.pid!);
      const exited = exitOf(p);
      p.kill("SIGKILL");
      for (const c of children) {
        try {
          process.kill(c, "SIGKILL");
        } catch {
          /* already gone */
        }
      }
      await exited;
      // The next start needs the old backends gone (they hold the shared memory).
      const deadline = Date.now() + 5_000;
      while (children.some(isAlive) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    },
  };
}

/**
 * Drops every database and role whose name starts with `<prefix>_` on the machine's shared
 * PostgreSQL (127.0.0.1:5432, which trusts the local user `postgres`): what a test's mesh made
 * there through a provider of that server, such as examples/providers/postgres.yaml. Databases
 * first, with their connections ended; then roles, longest names first, so a generation's login
 * role goes before the group it is a member of.
 */
export async function dropFromSharedPostgres(prefix: string): Promise<void> {
  const c = new pg.Client({ host: "127.0.0.1", port: 5432, user: "postgres", database: "postgres" });
  await c.connect();
  try {
    const like = `${prefix}\\_%`;
    for (const r of (await c.query<{ datname: string }>("select datname from pg_database where datname like $1", [like])).rows)
      await c.query(`drop database if exists "${r.datname}" with (force)`);
    for (const r of (await c.query<{ rolname: string }>("select rolname from pg_roles where rolname like $1 order by length(rolname) desc", [like])).rows)
      await c.query(`drop role if exists "${r.rolname}"`);
  } finally {
    await c.end();
  }
}

/**
 * Holds the names `<prefix>_*` on the machine's shared PostgreSQL until the returned function
 * is called, so that test files provisioning the same example there (test/up.test.ts and
 * test/release.test.ts both make shop's database, shop_db) take turns instead of dropping what
 * the other made. The hold is a directory in the temporary directory with the holder's PID; a
 * holder that is gone is taken over.
 */
export async function holdSharedPostgresNames(prefix: string, timeoutMs = 300_000): Promise<() => void> {
  const lock = join(tmpdir(), `mesh-test-shared-postgres-${prefix}.lock`);
  const pidFile = join(lock, "pid");
  await waitFor(
    `the names ${prefix}_* on the shared PostgreSQL, held by another test file (${lock})`,
    () => {
      try {
        mkdirSync(lock);
        writeFileSync(pidFile, String(process.pid));
        return true;
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
      }
      const holder = existsSync(pidFile) ? Number(readFileSync(pidFile, "utf8")) : NaN;
      if (holder > 0 && !isAlive(holder)) rmSync(lock, { recursive: true, force: true });
      return false;
    },
    timeoutMs,
    200,
  );
  return () => rmSync(lock, { recursive: true, force: true });
}
