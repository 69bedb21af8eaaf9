/**
 * The adapter of kind `mariadb.database`: a database and the users that share it, made
 * through the provider's admin connection.
 *
 * Layout per grant (see docs/design.md, "Overlap per backend"): database `<base>`; user `<base>_a`
 * serves odd generations and `<base>_b` even ones, both `@'%'` with ALL on `<base>`.*, so
 * whatever either creates the other can use. MariaDB keeps one password per user and has no
 * `RETAIN CURRENT PASSWORD`, so a rotation stages generation k+1 on the other user while k
 * keeps working. Retiring a generation locks its user (`ACCOUNT LOCK`) and ends its sessions;
 * staging it again sets the new password and unlocks it.
 *
 * What the mesh made is marked in a table of its own, `mesh_meta.objects` (type, name, grant).
 * MariaDB 10.11 has no user comments or attributes (MySQL 8 has; 10.11 refuses the grammar), and
 * a database COMMENT can be rewritten by the grant's own users (ALL on the database includes
 * ALTER), while the table is out of their reach. An object of the grant's name without the
 * grant's mark is a Conflict and is never taken over. The mark is written just before the object
 * is created, as DDL commits on its own and cannot share a transaction with it.
 *
 * Passwords reach the server as mysql_native_password hashes (`IDENTIFIED BY PASSWORD`): MariaDB
 * writes `IDENTIFIED BY '<plaintext>'` as it is to its general log (seen on 10.11) and shows it in
 * the process list while it runs. They never appear in an error message.
 *
 * A provider with `tls:` is reached over TLS alone, every connection verifying the server's
 * chain and its name (provider-tls.ts); its bindings carry the bundle as `ca.crt`, and a login is
 * made the way its binding says. mysql2 checks the certificate for the host it connects to, so
 * `tls.serverName` is refused: the endpoint must name the server as its certificate does.
 */
import { createHash } from "node:crypto";
import mysql from "mysql2/promise";
import { ErrorCodes, Kinds, MeshError, errorMessage } from "@mesh/shared";
import type {
  AdapterFactory,
  AdminLoginRequest,
  CreateRequest,
  CreateResult,
  DeleteRequest,
  LoginRequest,
  LoginResult,
  ObserveRequest,
  ObserveResult,
  ProviderAdapter,
  ProviderConfig,
  RetireRequest,
  ServerTls,
  SetAdminPasswordRequest,
} from "./adapter.js";
import { checkGrantRef } from "./grant-ref.js";
import { generatePassword, passwordOf } from "./password.js";
import { parseEndpoint } from "./endpoint.js";
import { ACCOUNT_HOST, META_DATABASE, loginUserName, mariadbNames, quoteAccount as qa, quoteIdentifier as qi } from "./mariadb-identifiers.js";
import { hasNetworkCode } from "./network-errors.js";
import { bindingCa, caBindings, unverifiedLogin, unverifiedServer, trustsResource } from "./provider-tls.js";

/** How long a {@link ProviderAdapter.login} may take, connect and `select 1` each. */
export const LOGIN_TIMEOUT_MS = 3_000;
/** How long connecting the admin connection may take. */
export const ADMIN_CONNECT_TIMEOUT_MS = 5_000;
/** The port of an endpoint that names none. */
export const DEFAULT_PORT = 3306;

/** Makes the `mariadb.database` adapter of `provider`; throws `ProviderMisconfigured` for a bad endpoint. */
export const createMariadbAdapter: AdapterFactory = (provider) => new MariadbAdapter(provider);

/**
 * The mysql_native_password hash MariaDB stores for `password` (what `PASSWORD('…')` returns):
 * `*` and the upper-case hex SHA-1 of the SHA-1 of its UTF-8 bytes.
 */
export function nativePasswordHash(password: string): string {
  const once = createHash("sha1").update(password, "utf8").digest();
  return `*${createHash("sha1").update(once).digest("hex").toUpperCase()}`;
}

/** What mysql2 is given to verify the server with `tls`: the bundle alone, the chain and the name checked. */
function sslOf(tls: ServerTls | undefined): { ssl?: { ca: string; rejectUnauthorized: true; verifyIdentity: true } } {
  return tls ? { ssl: { ca: tls.ca, rejectUnauthorized: true, verifyIdentity: true } } : {};
}

interface Endpoint {
  host: string;
  port: number;
  /** What every connection verifies the server with; none without the provider's `tls:`. */
  tls?: ServerTls;
}

type SqlError = Error & { code?: string; errno?: number; sqlState?: string; errors?: unknown[] };

type Conn = mysql.PoolConnection;
type Row = mysql.RowDataPacket;

/** The server's error numbers the adapter tells apart (include/mysqld_error.h, MariaDB's). */
const ER = {
  DBACCESS_DENIED: 1044,
  ACCESS_DENIED: 1045,
  BAD_DB: 1049,
  CON_COUNT: 1040,
  SERVER_SHUTDOWN: 1053,
  BAD_FIELD: 1054,
  DB_CREATE_EXISTS: 1007,
  NO_SUCH_THREAD: 1094,
  KILL_DENIED: 1095,
  HOST_NOT_PRIVILEGED: 1130,
  TABLEACCESS_DENIED: 1142,
  NO_SUCH_TABLE: 1146,
  LOCK_WAIT_TIMEOUT: 1205,
  NO_PERMISSION_TO_CREATE_USER: 1211,
  LOCK_DEADLOCK: 1213,
  SPECIFIC_ACCESS_DENIED: 1227,
  CANNOT_USER: 1396,
  CANT_CREATE_USER_WITH_GRANT: 1410,
  ACCESS_DENIED_NO_PASSWORD: 1698,
  CONNECTION_KILLED: 1927,
  ACCOUNT_HAS_BEEN_LOCKED: 4151,
} as const;

/** Failures of a login itself (bad credential, locked or unknown account). */
const LOGIN_REFUSED: ReadonlySet<number> = new Set([ER.ACCESS_DENIED, ER.ACCESS_DENIED_NO_PASSWORD, ER.ACCOUNT_HAS_BEEN_LOCKED, ER.HOST_NOT_PRIVILEGED]);
/** The admin user lacks a privilege it needs. */
const PRIVILEGE_MISSING: ReadonlySet<number> = new Set([
  ER.DBACCESS_DENIED,
  ER.KILL_DENIED,
  ER.TABLEACCESS_DENIED,
  ER.NO_PERMISSION_TO_CREATE_USER,
  ER.SPECIFIC_ACCESS_DENIED,
  ER.CANT_CREATE_USER_WITH_GRANT,
]);

/** What the admin user needs, for messages. */
const ADMIN_PRIVILEGES =
  "ALL PRIVILEGES ON *.* WITH GRANT OPTION, or at least CREATE USER, PROCESS, CONNECTION ADMIN and the database privileges (SELECT … DELETE HISTORY) ON *.* WITH GRANT OPTION";

/** The mark of a grant in `mesh_meta.objects`. */
const markOf = (module: string, requirement: string) => `${module}/${requirement}`;

type ObjectType = "database" | "user";

/** A user name as the server has it: its hosts, whether `name@'%'` is locked, and the mesh's mark. */
interface UserState {
  hosts: string[];
  locked: boolean;
  mark: string | undefined;
}

class MariadbAdapter implements ProviderAdapter {
  readonly kinds = [Kinds.MariadbDatabase] as const;
  private readonly endpoint: Endpoint;
  private readonly adminUser: string;
  private pool: mysql.Pool | undefined;

  constructor(private readonly provider: ProviderConfig) {
    this.endpoint = endpointOf(provider);
    this.adminUser = provider.admin?.username ?? "root";
  }

  generate() {
    return generatePassword();
  }

  async observe(req: ObserveRequest): Promise<ObserveResult> {
    checkGrantRef(req.grant);
    const { module, requirement, generation } = req.grant;
    const { database } = mariadbNames(module, requirement);
    const user = loginUserName(database, generation);
    return this.admin(`observe ${module}/${requirement}`, async (c) => {
      const mark = markOf(module, requirement);
      const db = await readDatabase(c, database);
      const u = (await readUsers(c, [user])).get(user)!;
      const conflicts = conflictsOf(mark, database, db, user, u);
      const dbOk = db.exists && db.mark === mark;
      const userOk = madeBy(mark, u);
      const details: Record<string, string> = {};
      if (dbOk) details.database = database;
      if (userOk) {
        details.user = user;
        if (u.locked) details.userLogin = "locked";
      }
      if (conflicts.length > 0) details.conflict = conflicts.join("; ");
      return { exists: dbOk && userOk && conflicts.length === 0, details };
    });
  }

  async create(req: CreateRequest): Promise<CreateResult> {
    checkGrantRef(req.grant);
    const { module, requirement, generation } = req.grant;
    const { database } = mariadbNames(module, requirement);
    const user = loginUserName(database, generation);
    const password = passwordOf(req);
    const mark = markOf(module, requirement);
    await this.admin(`create ${module}/${requirement}`, async (c) => {
      const db = await readDatabase(c, database);
      const u = (await readUsers(c, [user])).get(user)!;
      // Every conflict is found before anything is made, so a refused create leaves nothing behind.
      const conflicts = conflictsOf(mark, database, db, user, u);
      if (conflicts.length > 0) {
        throw new MeshError(ErrorCodes.Conflict, `MariaDB ${conflicts.join("; ")}; drop or rename them, or rename the requirement`);
      }
      await ensureMetaTable(c);
      if (!db.exists) {
        await claim(c, "database", database, mark);
        // A create that lost a race to another provisioner finds the database made and marked.
        await ignoring(ER.DB_CREATE_EXISTS, c.query(`CREATE DATABASE ${qi(database)} CHARACTER SET utf8mb4`));
      }
      const hash = mysql.escape(nativePasswordHash(password));
      if (u.hosts.length === 0) {
        await claim(c, "user", user, mark);
        // Locked until it has its privileges and its password, in that order.
        await ignoring(ER.CANNOT_USER, c.query(`CREATE USER ${qa(user)} IDENTIFIED BY PASSWORD ${hash} ACCOUNT LOCK`));
      }
      // In a database-level GRANT, `_` and `%` are wildcards: unescaped, `a_b_c` would also
      // grant `axb_c`, another grant's database (names the mesh makes always hold `_`).
      await c.query(`GRANT ALL PRIVILEGES ON ${qi(database).replaceAll("_", "\\_")}.* TO ${qa(user)}`);
      await c.query(`UPDATE ${META} SET generation = ? WHERE type = 'user' AND name = ?`, [generation, user]);
      await c.query(`ALTER USER ${qa(user)} IDENTIFIED BY PASSWORD ${hash} ACCOUNT UNLOCK`);
    });
    const { host, port } = this.endpoint;
    const hostInUri = host.includes(":") ? `[${host}]` : host;
    const enc = encodeURIComponent;
    return {
      resource: { database, user, ...trustsResource(this.endpoint.tls) },
      bindings: {
        type: "mysql",
        provider: this.provider.name,
        host,
        port: String(port),
        database,
        username: user,
        password,
        uri: `mysql://${enc(user)}:${enc(password)}@${hostInUri}:${port}/${enc(database)}${this.endpoint.tls ? "?ssl-mode=VERIFY_IDENTITY" : ""}`,
        ...caBindings(this.endpoint.tls),
      },
    };
  }

  async delete(req: DeleteRequest): Promise<void> {
    checkGrantRef(req.grant);
    const { module, requirement } = req.grant;
    const { database, users } = mariadbNames(module, requirement);
    const mark = markOf(module, requirement);
    await this.admin(`delete ${module}/${requirement}`, async (c) => {
      // Users first: a session of theirs could otherwise create the database again.
      for (const [user, u] of await readUsers(c, [...users])) {
        if (u.mark !== mark) continue; // not the mesh's: left alone
        if (u.hosts.includes(ACCOUNT_HOST)) {
          await c.query(`DROP USER IF EXISTS ${qa(user)}`);
          await killSessions(c, user);
        }
        await release(c, "user", user, mark);
      }
      const db = await readDatabase(c, database);
      if (db.mark === mark) {
        if (db.exists) await c.query(`DROP DATABASE IF EXISTS ${qi(database)}`);
        await release(c, "database", database, mark);
      }
    });
  }

  /**
   * Retires the user of `req.grant.generation`: `ACCOUNT LOCK`, then its open sessions are
   * ended (a lock only stops new logins). Only a user carrying the grant's mark is touched; a
   * missing one is fine.
   */
  async retire(req: RetireRequest): Promise<void> {
    checkGrantRef(req.grant);
    const { module, requirement, generation } = req.grant;
    const { database } = mariadbNames(module, requirement);
    const user = loginUserName(database, generation);
    const mark = markOf(module, requirement);
    await this.admin(`retire generation ${generation} of ${module}/${requirement}`, async (c) => {
      if (!madeBy(mark, (await readUsers(c, [user])).get(user)!)) return;
      // The user serves a later generation now (k+2 uses k's user again): this retire is stale.
      if (((await servedGeneration(c, user)) ?? 0) > generation) return;
      await c.query(`ALTER USER ${qa(user)} ACCOUNT LOCK`);
      await killSessions(c, user);
    });
  }

  async login(req: LoginRequest): Promise<LoginResult> {
    const b = req.bindings;
    const lacking = ["host", "port", "database", "username", "password"].filter((k) => !b[k]);
    if (lacking.length > 0) return { ok: false, reason: "rejected", message: `the binding lacks ${lacking.join(", ")}` };
    const where = `${b.host}:${b.port}`;
    const tls = bindingCa(b);
    let conn: mysql.Connection | undefined;
    try {
      conn = await mysql.createConnection({
        host: b.host,
        port: Number(b.port),
        database: b.database,
        user: b.username,
        password: b.password,
        connectTimeout: LOGIN_TIMEOUT_MS,
        ...sslOf(tls),
      });
      conn.on("error", () => {}); // a late socket error must not crash the process; the call below reports it
      await conn.query({ sql: "select 1", timeout: LOGIN_TIMEOUT_MS });
      return { ok: true };
    } catch (e) {
      return classifyLogin(e, where, b.username!, b.database!, Boolean(tls));
    } finally {
      await conn?.end().catch(() => conn?.destroy());
    }
  }

  /** Connects as the admin user with `req.password` (no database) and runs `select 1`; never mutates. */
  async loginAdmin(req: AdminLoginRequest): Promise<LoginResult> {
    const { host, port } = this.endpoint;
    const where = `${host}:${port}`;
    let conn: mysql.Connection | undefined;
    try {
      conn = await this.adminConnection(req.password, LOGIN_TIMEOUT_MS);
      await conn.query({ sql: "select 1", timeout: LOGIN_TIMEOUT_MS });
      return { ok: true };
    } catch (e) {
      return classifyLogin(e, where, this.adminUser, "", Boolean(this.endpoint.tls));
    } finally {
      await conn?.end().catch(() => conn?.destroy());
    }
  }

  /**
   * `SET PASSWORD = '<hash>'` (the admin's own account, whichever host entry it logged in
   * through) on a connection made with `req.current`; the plaintext never reaches the server. An
   * account that also authenticates by another plugin (`unix_socket OR mysql_native_password`)
   * should keep it, as MariaDB documents SET PASSWORD to change only the password-based ones (not
   * tried here: the tests' servers authenticate root by password alone).
   */
  async setAdminPassword(req: SetAdminPasswordRequest): Promise<void> {
    const what = `set the admin user ${JSON.stringify(this.adminUser)}'s password`;
    let conn: mysql.Connection | undefined;
    try {
      conn = await this.adminConnection(req.current, ADMIN_CONNECT_TIMEOUT_MS);
      await conn.query(`SET PASSWORD = ${mysql.escape(nativePasswordHash(req.next))}`);
    } catch (e) {
      // Set already (by another instance, or a run that died after it): nothing to do.
      if (LOGIN_REFUSED.has((e as SqlError).errno ?? -1) && (await this.loginAdmin({ password: req.next })).ok) return;
      throw this.adminError(what, redactHashes(e));
    } finally {
      await conn?.end().catch(() => conn?.destroy());
    }
  }

  /** A connection of its own (not the pool's) as the admin user with `password`. */
  private async adminConnection(password: string, timeoutMs: number): Promise<mysql.Connection> {
    const { host, port } = this.endpoint;
    const conn = await mysql.createConnection({
      host,
      port,
      user: this.adminUser,
      password,
      connectTimeout: timeoutMs,
      multipleStatements: false,
      ...sslOf(this.endpoint.tls),
    });
    conn.on("error", () => {}); // a late socket error must not crash the process; the call reports it
    return conn;
  }

  async close(): Promise<void> {
    const pool = this.pool;
    this.pool = undefined;
    await pool?.end();
  }

  /** Runs `fn` on an admin connection; maps every failure to a MeshError that says what to do. */
  private async admin<T>(what: string, fn: (c: Conn) => Promise<T>): Promise<T> {
    let conn: Conn | undefined;
    try {
      conn = await this.liveAdminConnection();
      return await fn(conn);
    } catch (e) {
      if (!(e instanceof MeshError)) {
        // A connection that failed is not reused: its session state is unknown.
        conn?.destroy();
        conn = undefined;
      }
      throw this.adminError(what, redactHashes(e));
    } finally {
      conn?.release();
    }
  }

  /**
   * A pooled admin connection that answers: one the server ended while it sat idle in the pool
   * (its `wait_timeout`, a `KILL`, a restart) fails its ping and is replaced before any statement
   * is sent on it, so no call fails, or half-runs, for a socket the pool had not yet heard close.
   */
  private async liveAdminConnection(): Promise<Conn> {
    for (let attempt = 0; ; attempt++) {
      const conn = await this.adminPool().getConnection();
      try {
        await conn.ping();
        return conn;
      } catch (e) {
        conn.destroy();
        if (attempt >= ADMIN_POOL_SIZE || !isUnreachable(e)) throw e;
      }
    }
  }

  private adminPool(): mysql.Pool {
    if (!this.pool) {
      const { host, port } = this.endpoint;
      this.pool = mysql.createPool({
        host,
        port,
        user: this.adminUser,
        password: this.provider.admin?.password,
        connectionLimit: ADMIN_POOL_SIZE,
        connectTimeout: ADMIN_CONNECT_TIMEOUT_MS,
        ...sslOf(this.endpoint.tls),
        // Statements are sent one at a time: a name that slipped through could not chain a second one.
        multipleStatements: false,
      });
      // An idle connection dropped by the server (a restart) must not be an uncaught error; the next use reconnects.
      this.pool.pool.on("connection", (c: NodeJS.EventEmitter) => c.on("error", () => {}));
    }
    return this.pool;
  }

  private adminError(what: string, e: unknown): MeshError {
    if (e instanceof MeshError) return e;
    const errno = (e as SqlError).errno;
    const at = `MariaDB provider ${this.provider.name} at ${this.provider.endpoint}`;
    const why = errorMessage(e) || (e as SqlError).code || "unknown error";
    const tls = unverifiedServer(at, what, e, Boolean(this.endpoint.tls));
    if (tls) return tls;
    if (isUnreachable(e)) {
      return new MeshError(
        ErrorCodes.ProviderUnreachable,
        `${at} is unreachable (${why}), so could not ${what}; check that the server runs, listens on that address and accepts connections from this node`,
        { retryable: true, cause: e },
      );
    }
    if (errno !== undefined && LOGIN_REFUSED.has(errno)) {
      return new MeshError(
        ErrorCodes.ProviderMisconfigured,
        `${at} rejected the admin user ${JSON.stringify(this.adminUser)} (${why}), so could not ${what}; check admin.username and the password given by the provider's admin.passwordEnv or admin.passwordFile`,
        { cause: e },
      );
    }
    if (errno !== undefined && PRIVILEGE_MISSING.has(errno)) {
      return new MeshError(
        ErrorCodes.ProviderMisconfigured,
        `${at}: the admin user ${JSON.stringify(this.adminUser)} lacks a privilege to ${what} (${why}); it needs ${ADMIN_PRIVILEGES}`,
        { cause: e },
      );
    }
    const retryable = errno === ER.LOCK_DEADLOCK || errno === ER.LOCK_WAIT_TIMEOUT;
    return new MeshError(ErrorCodes.ProviderRejected, `${at} refused to ${what}: ${why}${errno ? ` (error ${errno})` : ""}`, {
      retryable,
      cause: e,
    });
  }
}

function endpointOf(provider: ProviderConfig): Endpoint {
  const { host, port } = parseEndpoint(provider, {
    schemes: ["mysql", "mariadb"],
    example: "mysql://127.0.0.1:3306",
    defaultPort: () => DEFAULT_PORT,
    refusePath: "names a database; it names the server only",
  });
  if (provider.tls?.serverName) {
    throw new MeshError(
      ErrorCodes.ProviderMisconfigured,
      `provider ${provider.name}: MariaDB's client checks the server's certificate for the host the endpoint names, so tls.serverName cannot be honoured; name the server in the endpoint as its certificate does, and leave tls.serverName out`,
    );
  }
  return { host, port, ...(provider.tls ? { tls: provider.tls } : {}) };
}

/**
 * `e` with every password hash in its message and statement replaced: mysql2 keeps the failed
 * statement in `sql`, and a syntax error quotes it. Not a plaintext, but still not for a log.
 */
function redactHashes(e: unknown): unknown {
  const hide = (s: string) => s.replace(/\*[0-9A-F]{40}/g, "*<hash>");
  const err = e as SqlError & { sql?: string; sqlMessage?: string };
  if (!(err instanceof Error) || e instanceof MeshError) return e;
  err.message = hide(err.message);
  if (typeof err.sql === "string") err.sql = hide(err.sql);
  if (typeof err.sqlMessage === "string") err.sqlMessage = hide(err.sqlMessage);
  return err;
}

/** Runs `q`, treating server error `errno` as success. */
async function ignoring(errno: number, q: Promise<unknown>): Promise<void> {
  try {
    await q;
  } catch (e) {
    if ((e as SqlError).errno !== errno) throw e;
  }
}

/** True when `u` is the account `name@'%'` the mesh made for the grant marked `mark`. */
const madeBy = (mark: string, u: UserState) => u.mark === mark && u.hosts.includes(ACCOUNT_HOST);

/** Why the grant's database and user are not the mesh's to use; empty when they are (or are missing). */
function conflictsOf(mark: string, database: string, db: { exists: boolean; mark: string | undefined }, user: string, u: UserState): string[] {
  const conflicts: string[] = [];
  const notOurs = (m: string | undefined) => (m === undefined ? "was not made by the mesh" : `was made by the mesh for grant ${m}, not ${mark}`);
  if (db.exists && db.mark !== mark) conflicts.push(`database ${database} already exists and ${notOurs(db.mark)}`);
  if (u.hosts.length > 0 && u.mark !== mark) conflicts.push(`user ${user} already exists and ${notOurs(u.mark)}`);
  // Another host of the name would take the logins from that host (MariaDB picks the most specific).
  const others = u.hosts.filter((h) => h !== ACCOUNT_HOST);
  if (u.mark === mark && others.length > 0) conflicts.push(`user ${user} also exists for host ${others.join(", ")}, which the mesh did not make`);
  return conflicts;
}

async function readDatabase(c: Conn, name: string): Promise<{ exists: boolean; mark: string | undefined }> {
  const [rows] = await c.query<Row[]>("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", [name]);
  return { exists: rows.length > 0, mark: (await readMarks(c, "database", [name])).get(name) };
}

/** The state of each of `names` (no hosts: no such user). */
async function readUsers(c: Conn, names: string[]): Promise<Map<string, UserState>> {
  // mysql.global_priv is the table behind mysql.user since 10.4; account_locked is in its JSON.
  const [rows] = await c.query<Row[]>(
    "SELECT User AS name, Host AS host, JSON_VALUE(Priv, '$.account_locked') AS locked FROM mysql.global_priv WHERE User IN (?)",
    [names],
  );
  const marks = await readMarks(c, "user", names);
  const users = new Map<string, UserState>(names.map((n) => [n, { hosts: [], locked: false, mark: marks.get(n) }]));
  for (const r of rows) {
    const u = users.get(String(r.name))!;
    u.hosts.push(String(r.host));
    if (r.host === ACCOUNT_HOST) u.locked = r.locked === "1" || r.locked === "true";
  }
  return users;
}

const META = `${qi(META_DATABASE)}.\`objects\``;

/** Makes `mesh_meta.objects` unless it exists. */
async function ensureMetaTable(c: Conn): Promise<void> {
  await c.query(`CREATE DATABASE IF NOT EXISTS ${qi(META_DATABASE)} CHARACTER SET ascii COMMENT 'the provisioning mesh''s marks on what it made'`);
  await c.query(
    `CREATE TABLE IF NOT EXISTS ${META} (
      type ENUM('database', 'user') NOT NULL,
      name VARCHAR(64) NOT NULL,
      grant_ref VARCHAR(81) NOT NULL COMMENT 'module/requirement',
      created_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
      PRIMARY KEY (type, name)
    ) ENGINE=InnoDB CHARACTER SET ascii COLLATE ascii_bin COMMENT 'one row per object the mesh made and may manage or drop'`,
  );
  // Which generation a user serves, so a late retire of generation 1 leaves alone the user that
  // generation 3 uses again. Added apart: a table made before it exists without it.
  await c.query(`ALTER TABLE ${META} ADD COLUMN IF NOT EXISTS generation INT UNSIGNED NULL COMMENT 'for a user: the credential generation it serves'`);
}

/** The generation user `name` serves, as recorded; undefined when none is. */
async function servedGeneration(c: Conn, name: string): Promise<number | undefined> {
  try {
    const [rows] = await c.query<Row[]>(`SELECT generation FROM ${META} WHERE type = 'user' AND name = ?`, [name]);
    const g = rows[0]?.generation;
    return g === null || g === undefined ? undefined : Number(g);
  } catch (e) {
    // A table from before the column, not touched by a create since: nothing is recorded.
    if ((e as SqlError).errno === ER.BAD_FIELD) return undefined;
    throw e;
  }
}

/** The marks of `names` of `type`: name → `module/requirement`. None while `mesh_meta` does not exist. */
async function readMarks(c: Conn, type: ObjectType, names: string[]): Promise<Map<string, string>> {
  try {
    const [rows] = await c.query<Row[]>(`SELECT name, grant_ref FROM ${META} WHERE type = ? AND name IN (?)`, [type, names]);
    return new Map(rows.map((r) => [String(r.name), String(r.grant_ref)]));
  } catch (e) {
    const errno = (e as SqlError).errno;
    if (errno === ER.NO_SUCH_TABLE || errno === ER.BAD_DB) return new Map();
    throw e;
  }
}

/** Marks `name` as the mesh's for the grant marked `mark` (kept if it is already). */
async function claim(c: Conn, type: ObjectType, name: string, mark: string): Promise<void> {
  await c.query(`INSERT INTO ${META} (type, name, grant_ref) VALUES (?, ?, ?) ON DUPLICATE KEY UPDATE grant_ref = grant_ref`, [type, name, mark]);
}

/** Removes the grant's mark from `name`, after the object is gone. */
async function release(c: Conn, type: ObjectType, name: string, mark: string): Promise<void> {
  await c.query(`DELETE FROM ${META} WHERE type = ? AND name = ? AND grant_ref = ?`, [type, name, mark]);
}

/** Ends every session of `user` (but the admin's own). */
async function killSessions(c: Conn, user: string): Promise<void> {
  const [rows] = await c.query<Row[]>("SELECT ID AS id FROM information_schema.PROCESSLIST WHERE USER = ? AND ID <> CONNECTION_ID()", [user]);
  for (const r of rows) await ignoring(ER.NO_SUCH_THREAD, c.query("KILL CONNECTION ?", [Number(r.id)]));
}

/** Admin connections a provider's pool keeps open at most. */
const ADMIN_POOL_SIZE = 4;

/** mysql2's own codes for a connection lost or a server that stopped answering, beside the network's. */
const PROTOCOL_LOST = new Set(["PROTOCOL_CONNECTION_LOST", "PROTOCOL_SEQUENCE_TIMEOUT"]);

/** True when `e` says the server could not be reached or is not accepting connections now. */
function isUnreachable(e: unknown): boolean {
  const err = e as SqlError;
  const errno = err?.errno;
  if (hasNetworkCode(e, PROTOCOL_LOST)) return true;
  if (errno === ER.CON_COUNT || errno === ER.SERVER_SHUTDOWN || errno === ER.CONNECTION_KILLED) return true;
  if (Array.isArray(err?.errors) && err.errors.some(isUnreachable)) return true;
  return /timeout|Connection lost/i.test(errorMessage(e));
}

function classifyLogin(e: unknown, where: string, user: string, database: string, overTls: boolean): LoginResult {
  const errno = (e as SqlError).errno;
  const why = errorMessage(e) || (e as SqlError).code || "unknown error";
  const tls = unverifiedLogin(`MariaDB at ${where}`, e, overTls);
  if (tls) return tls;
  // The user's privileges on the database outlive it (DROP DATABASE keeps them), so a dropped
  // database says "unknown database"; a database the user has no privilege on says access denied.
  if (errno === ER.BAD_DB) return { ok: false, reason: "missing", message: `database ${database} does not exist at ${where}` };
  if (errno !== undefined && (LOGIN_REFUSED.has(errno) || errno === ER.DBACCESS_DENIED)) {
    return { ok: false, reason: "rejected", message: `MariaDB at ${where} rejected ${user}: ${why}` };
  }
  return { ok: false, reason: "unreachable", message: `cannot log in to MariaDB at ${where}: ${why}` };
}
