/**
 * The adapter of kind `postgres.database`: a database and the login roles that own it,
 * made through the provider's admin connection.
 *
 * Layout per grant (see docs/design.md, "Overlap per backend"): a NOLOGIN group role `<base>` owns
 * database `<base>`; login role `<base>_a` serves odd generations and `<base>_b` even ones.
 * Both are members of the group with `ALTER ROLE … SET role = '<base>'`, so whatever either
 * creates is owned by the group and usable by the other: a rotation can stage generation k+1
 * beside k. Roles carry the comment `mesh grant <module>/<requirement>` and the database must
 * be owned by the group, so the adapter never takes over an object the mesh did not make.
 *
 * Passwords are sent as SCRAM-SHA-256 verifiers, never in plaintext, and never appear in an
 * error message.
 *
 * A provider with `tls:` is reached over TLS only, every connection verifying the server
 * (provider-tls.ts); its holders' bindings say `sslmode` `verify-full` and carry the bundle as
 * `sslrootcert`, so a client verifies it as the mesh does (a login of a binding is made the way
 * its values say).
 */
import pg from "pg";
import { ErrorCodes, Kinds, MeshError, errorMessage } from "@mesh/shared";
import type {
  AdapterFactory,
  AdminLoginRequest,
  SetAdminPasswordRequest,
  CreateResult,
  DeleteRequest,
  RetireRequest,
  LoginRequest,
  LoginResult,
  ObserveRequest,
  ObserveResult,
  ProviderAdapter,
  ProviderConfig,
  ServerTls,
  CreateRequest,
} from "./adapter.js";
import { checkGrantRef } from "./grant-ref.js";
import { generatePassword, passwordOf } from "./password.js";
import { parseEndpoint } from "./endpoint.js";
import { loginRoleName, postgresNames, quoteIdentifier as qi } from "./postgres-identifiers.js";
import { scramSha256Verifier } from "./scram.js";
import { hasNetworkCode } from "./network-errors.js";
import { unverifiedLogin, unverifiedServer, verifyingOptions, trustsResource } from "./provider-tls.js";

const { Client, Pool, escapeLiteral } = pg;

/** How long a {@link ProviderAdapter.login} may take, connect and `select 1` together. */
export const LOGIN_TIMEOUT_MS = 3_000;
/** How long connecting the admin connection may take. */
export const ADMIN_CONNECT_TIMEOUT_MS = 5_000;

/** Makes the `postgres.database` adapter of `provider`; throws `ProviderMisconfigured` for a bad endpoint. */
export const createPostgresAdapter: AdapterFactory = (provider) => new PostgresAdapter(provider);

interface Endpoint {
  host: string;
  port: number;
  adminDatabase: string;
}

type PgError = Error & { code?: string; errors?: unknown[] };

/** The comment that marks a role as the mesh's for one grant. */
const markerOf = (module: string, requirement: string) => `mesh grant ${module}/${requirement}`;

/**
 * A login role's comment also says which generation it serves (`mesh grant shop/db generation
 * 3`), so a late retire of generation 1 leaves alone the role that generation 3 uses again.
 * Role comments, because role-level settings of the mesh's own need a superuser.
 */
const SERVING = " generation ";
const servingMarker = (marker: string, generation: number) => `${marker}${SERVING}${generation}`;

/** Whether `comment` is the grant's mark (with or without the generation a login role serves). */
const isMarked = (comment: string | null | undefined, marker: string) =>
  comment === marker || (comment?.startsWith(`${marker}${SERVING}`) === true && /^\d+$/.test(comment.slice(marker.length + SERVING.length)));

/** The generation a marked login role serves, from its comment; undefined when it says none. */
const servedGeneration = (comment: string | null | undefined, marker: string) =>
  isMarked(comment, marker) && comment !== marker ? Number(comment!.slice(marker.length + SERVING.length)) : undefined;

class PostgresAdapter implements ProviderAdapter {
  readonly kinds = [Kinds.PostgresDatabase] as const;
  private readonly endpoint: Endpoint;
  private readonly adminUser: string;
  private pool: pg.Pool | undefined;

  constructor(private readonly provider: ProviderConfig) {
    this.endpoint = endpointOf(provider);
    this.adminUser = provider.admin?.username ?? "postgres";
  }

  generate() {
    return generatePassword();
  }

  async observe(req: ObserveRequest): Promise<ObserveResult> {
    checkGrantRef(req.grant);
    const { module, requirement, generation } = req.grant;
    const names = postgresNames(module, requirement);
    const role = loginRoleName(names.group, generation);
    return this.admin(`observe ${module}/${requirement}`, async (c) => {
      const marker = markerOf(module, requirement);
      const roles = await readRoles(c, [names.group, role]);
      const owner = await databaseOwner(c, names.database);
      const details: Record<string, string> = {};
      const conflicts: string[] = [];
      const ours = (name: string) => {
        const r = roles.get(name);
        if (r && !isMarked(r.comment, marker)) conflicts.push(`role ${name} exists but is not the mesh's for ${module}/${requirement}`);
        return isMarked(r?.comment, marker);
      };
      const groupOk = ours(names.group);
      const roleOk = ours(role);
      const dbOk = groupOk && owner === names.group;
      if (owner !== undefined && owner !== names.group) conflicts.push(`database ${names.database} is owned by ${owner}`);
      if (groupOk) details.group = names.group;
      if (dbOk) details.database = names.database;
      if (roleOk) {
        details.role = role;
        if (!roles.get(role)!.canLogin) details.roleLogin = "disabled";
      }
      if (conflicts.length > 0) details.conflict = conflicts.join("; ");
      const missing = (["group", "database", "role"] as const).filter((k) => !details[k]);
      return { exists: groupOk && dbOk && roleOk, details, ...(missing.length ? { missing } : {}) };
    });
  }

  async create(req: CreateRequest): Promise<CreateResult> {
    checkGrantRef(req.grant);
    const { module, requirement, generation } = req.grant;
    const names = postgresNames(module, requirement);
    const role = loginRoleName(names.group, generation);
    const password = passwordOf(req);
    const marker = markerOf(module, requirement);
    await this.admin(`create ${module}/${requirement}`, async (c) => {
      await ensureRole(c, names.group, marker);
      const { rows } = await c.query<{ rolsuper: boolean }>("select rolsuper from pg_roles where rolname = current_user");
      // A non-superuser admin (CREATEROLE, CREATEDB) must be a member of the group to make it the owner.
      if (!rows[0]?.rolsuper) await c.query(`GRANT ${qi(names.group)} TO CURRENT_USER`);
      await ensureDatabase(c, names.database, names.group);
      await ensureRole(c, role, marker);
      await c.query(`GRANT ${qi(names.group)} TO ${qi(role)}`);
      await c.query(`ALTER ROLE ${qi(role)} SET role = ${escapeLiteral(names.group)}`);
      await c.query(`COMMENT ON ROLE ${qi(role)} IS ${escapeLiteral(servingMarker(marker, generation))}`);
      // LOGIN last: a role is never able to log in before it has its password and membership.
      await c.query(`ALTER ROLE ${qi(role)} LOGIN PASSWORD ${escapeLiteral(passwordForServer(password))}`);
    });
    const { host, port } = this.endpoint;
    const hostInUri = host.includes(":") ? `[${host}]` : host;
    const enc = encodeURIComponent;
    return {
      resource: { database: names.database, group: names.group, role, ...trustsResource(this.provider.tls) },
      bindings: {
        type: "postgresql",
        provider: this.provider.name,
        host,
        port: String(port),
        database: names.database,
        username: role,
        password,
        uri: `postgresql://${enc(role)}:${enc(password)}@${hostInUri}:${port}/${enc(names.database)}${this.provider.tls ? `?sslmode=${VERIFY_FULL}` : ""}`,
        ...tlsBindings(this.provider.tls),
      },
    };
  }

  async delete(req: DeleteRequest): Promise<void> {
    checkGrantRef(req.grant);
    const { module, requirement } = req.grant;
    const names = postgresNames(module, requirement);
    const marker = markerOf(module, requirement);
    await this.admin(`delete ${module}/${requirement}`, async (c) => {
      const roles = await readRoles(c, [names.group, ...names.logins]);
      const ours = (name: string) => isMarked(roles.get(name)?.comment, marker);
      // Only what carries the grant's marker goes; anything else of that name is left alone.
      if (ours(names.group) && (await databaseOwner(c, names.database)) === names.group) {
        await c.query(`DROP DATABASE IF EXISTS ${qi(names.database)} WITH (FORCE)`);
      }
      for (const role of names.logins) if (ours(role)) await c.query(`DROP ROLE IF EXISTS ${qi(role)}`);
      if (ours(names.group)) await c.query(`DROP ROLE IF EXISTS ${qi(names.group)}`);
    });
  }

  /**
   * Retires the login role of `req.grant.generation`: `NOLOGIN`, then its open sessions are
   * ended. Only a role carrying the grant's marker is touched; a missing one is fine.
   */
  async retire(req: RetireRequest): Promise<void> {
    checkGrantRef(req.grant);
    const { module, requirement, generation } = req.grant;
    const names = postgresNames(module, requirement);
    const role = loginRoleName(names.group, generation);
    const marker = markerOf(module, requirement);
    await this.admin(`retire generation ${generation} of ${module}/${requirement}`, async (c) => {
      const r = (await readRoles(c, [role])).get(role);
      if (!r || !isMarked(r.comment, marker)) return;
      // The role serves a later generation now (k+2 uses k's role again): this retire is stale.
      if ((servedGeneration(r.comment, marker) ?? 0) > generation) return;
      await c.query(`ALTER ROLE ${qi(role)} NOLOGIN`);
      await c.query("select pg_terminate_backend(pid) from pg_stat_activity where usename = $1 and pid <> pg_backend_pid()", [role]);
    });
  }

  async login(req: LoginRequest): Promise<LoginResult> {
    const b = req.bindings;
    const lacking = ["host", "port", "database", "username", "password"].filter((k) => !b[k]);
    if (lacking.length > 0) return { ok: false, reason: "rejected", message: `the binding lacks ${lacking.join(", ")}` };
    const where = `${b.host}:${b.port}`;
    const tls = bindingTls(b);
    if (tls === "unsupported") {
      return {
        ok: false,
        reason: "rejected",
        message: `the binding's sslmode ${JSON.stringify(b.sslmode)} is not one the mesh logs in with (${VERIFY_FULL}, or none)`,
      };
    }
    const client = new Client({
      host: b.host,
      port: Number(b.port),
      database: b.database,
      user: b.username,
      password: b.password,
      ssl: tls ? verifyingOptions(tls, b.host!) : false,
      connectionTimeoutMillis: LOGIN_TIMEOUT_MS,
      query_timeout: LOGIN_TIMEOUT_MS,
      application_name: "mesh-login-check",
    });
    client.on("error", () => {}); // a late socket error must not crash the process; the call below reports it
    try {
      await client.connect();
      await client.query("select 1");
      return { ok: true };
    } catch (e) {
      return classifyLogin(e, where, b.username!, b.database!);
    } finally {
      await client.end().catch(() => {});
    }
  }

  async loginAdmin(req: AdminLoginRequest): Promise<LoginResult> {
    const { host, port, adminDatabase } = this.endpoint;
    return this.login({
      bindings: { host, port: String(port), database: adminDatabase, username: this.adminUser, password: req.password, ...tlsBindings(this.provider.tls) },
    });
  }

  /** `ALTER ROLE CURRENT_USER PASSWORD` (a SCRAM verifier) on a connection made with `req.current`. */
  async setAdminPassword(req: SetAdminPasswordRequest): Promise<void> {
    const what = "set the admin user's password";
    const { host, port, adminDatabase } = this.endpoint;
    const client = new Client({
      host,
      port,
      database: adminDatabase,
      user: this.adminUser,
      password: req.current,
      ssl: this.ssl(),
      connectionTimeoutMillis: ADMIN_CONNECT_TIMEOUT_MS,
      application_name: "mesh-provisioner",
    });
    client.on("error", () => {}); // reported by the calls below
    try {
      await client.connect();
      await client.query(`ALTER ROLE CURRENT_USER PASSWORD ${escapeLiteral(passwordForServer(req.next))}`);
    } catch (e) {
      // Set already (by another instance, or a run that died after it): nothing to do.
      if ((e as PgError).code?.startsWith("28") && (await this.loginAdmin({ password: req.next })).ok) return;
      throw this.adminError(what, e);
    } finally {
      await client.end().catch(() => {});
    }
  }

  async close(): Promise<void> {
    const pool = this.pool;
    this.pool = undefined;
    await pool?.end();
  }

  /** Runs `fn` on an admin connection; maps every failure to a MeshError that says what to do. */
  private async admin<T>(what: string, fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
    let client: pg.PoolClient | undefined;
    let failed = false;
    // A checked-out client has no error listener of the pool's: the server ending the session
    // between two queries (a restart) would otherwise be an uncaught exception.
    const onError = () => {
      failed = true;
    };
    try {
      client = await this.adminPool().connect();
      client.on("error", onError);
      return await fn(client);
    } catch (e) {
      failed = true;
      throw this.adminError(what, e);
    } finally {
      client?.off("error", onError);
      client?.release(failed); // a client that failed is not reused
    }
  }

  private adminPool(): pg.Pool {
    if (!this.pool) {
      const { host, port, adminDatabase } = this.endpoint;
      this.pool = new Pool({
        host,
        port,
        database: adminDatabase,
        user: this.adminUser,
        password: this.provider.admin?.password,
        ssl: this.ssl(),
        max: 4,
        idleTimeoutMillis: 30_000,
        connectionTimeoutMillis: ADMIN_CONNECT_TIMEOUT_MS,
        allowExitOnIdle: true,
        application_name: "mesh-provisioner",
      });
      this.pool.on("error", () => {}); // an idle connection dropped by the server; the next use reconnects
    }
    return this.pool;
  }

  /** What the admin's connections verify the server with: `false` (plain) for a provider without `tls:`. */
  private ssl() {
    return this.provider.tls ? verifyingOptions(this.provider.tls, this.endpoint.host) : false;
  }

  private adminError(what: string, e: unknown): MeshError {
    if (e instanceof MeshError) return e;
    const code = (e as PgError).code;
    const at = `PostgreSQL provider ${this.provider.name} at ${this.provider.endpoint}`;
    const why = errorMessage(e) || code || "unknown error";
    const tls = unverifiedServer(at, what, e);
    if (tls) return tls;
    if (isUnreachable(e)) {
      return new MeshError(
        ErrorCodes.ProviderUnreachable,
        `${at} is unreachable (${why}), so could not ${what}; check that the server runs, listens on that address and accepts connections from this node`,
        { retryable: true, cause: e },
      );
    }
    if (code?.startsWith("28")) {
      return new MeshError(
        ErrorCodes.ProviderMisconfigured,
        `${at} rejected the admin user ${JSON.stringify(this.adminUser)} (${why}), so could not ${what}; check admin.username and the password given by the provider's admin.passwordEnv or admin.passwordFile`,
        { cause: e },
      );
    }
    if (code === "42501") {
      return new MeshError(
        ErrorCodes.ProviderMisconfigured,
        `${at}: the admin user ${JSON.stringify(this.adminUser)} lacks a privilege to ${what} (${why}); it needs superuser, or CREATEROLE, CREATEDB and pg_signal_backend`,
        { cause: e },
      );
    }
    // Serialization failures, lock and resource shortages pass; other refusals need a person.
    const retryable = ["40", "53", "55"].some((c) => code?.startsWith(c));
    return new MeshError(ErrorCodes.ProviderRejected, `${at} refused to ${what}: ${why}${code ? ` (SQLSTATE ${code})` : ""}`, {
      retryable,
      cause: e,
    });
  }
}

/** The one `sslmode` the mesh writes and logs in with: encrypted, the chain and the server's name verified. */
const VERIFY_FULL = "verify-full";

/** The binding keys that tell a holder's client to verify the server as the mesh does; none without `tls`. */
function tlsBindings(tls: ServerTls | undefined): Record<string, string> {
  if (!tls) return {};
  return { sslmode: VERIFY_FULL, sslrootcert: tls.ca, ...(tls.serverName ? { sslservername: tls.serverName } : {}) };
}

/** What a login with binding `b` verifies: none for a binding without `sslmode`, its bundle and name otherwise. */
function bindingTls(b: Record<string, string | undefined>): ServerTls | undefined | "unsupported" {
  if (!b.sslmode || b.sslmode === "disable") return undefined;
  if (b.sslmode !== VERIFY_FULL || !b.sslrootcert) return "unsupported";
  return { ca: b.sslrootcert, ...(b.sslservername ? { serverName: b.sslservername } : {}) };
}

function endpointOf(provider: ProviderConfig): Endpoint {
  const e = parseEndpoint(provider, { schemes: ["postgres", "postgresql"], example: "postgres://127.0.0.1:5432", defaultPort: () => 5432 });
  return { host: e.host, port: e.port, adminDatabase: e.path || "postgres" };
}

/** What the server stores: a SCRAM verifier for the printable-ASCII passwords the mesh makes. */
function passwordForServer(password: string): string {
  // Other passwords go as they are: the verifier would need SASLprep to match what clients send.
  return /^[\x21-\x7e]+$/.test(password) ? scramSha256Verifier(password) : password;
}

interface RoleRow {
  comment: string | null;
  canLogin: boolean;
}

async function readRoles(c: pg.PoolClient, names: string[]): Promise<Map<string, RoleRow>> {
  const { rows } = await c.query<{ rolname: string; comment: string | null; rolcanlogin: boolean }>(
    "select rolname, shobj_description(oid, 'pg_authid') as comment, rolcanlogin from pg_roles where rolname = any($1::text[])",
    [names],
  );
  return new Map(rows.map((r) => [r.rolname, { comment: r.comment, canLogin: r.rolcanlogin }]));
}

async function databaseOwner(c: pg.PoolClient, name: string): Promise<string | undefined> {
  const { rows } = await c.query<{ owner: string }>("select pg_get_userbyid(datdba) as owner from pg_database where datname = $1", [name]);
  return rows[0]?.owner;
}

/** True for "already exists", including the unique-index error of two creators racing. */
const isDuplicate = (e: unknown) => ["42710", "42P04", "23505"].includes((e as PgError).code ?? "");

/** Makes NOLOGIN role `name` marked with `marker` unless it exists; refuses a role of that name not so marked. */
async function ensureRole(c: pg.PoolClient, name: string, marker: string): Promise<void> {
  if (!(await readRoles(c, [name])).has(name)) {
    try {
      // Role and marker in one transaction, so no other provisioner sees the role unmarked.
      await c.query("BEGIN");
      await c.query(`CREATE ROLE ${qi(name)} NOLOGIN`);
      await c.query(`COMMENT ON ROLE ${qi(name)} IS ${escapeLiteral(marker)}`);
      await c.query("COMMIT");
    } catch (e) {
      await c.query("ROLLBACK").catch(() => {});
      if (!isDuplicate(e)) throw e;
    }
  }
  const comment = (await readRoles(c, [name])).get(name)?.comment;
  if (!isMarked(comment, marker)) {
    throw new MeshError(
      ErrorCodes.Conflict,
      `PostgreSQL role ${name} already exists and was not made by the mesh for this grant (its comment is ${JSON.stringify(comment ?? null)}, expected ${JSON.stringify(marker)}); drop or rename that role, or rename the requirement`,
    );
  }
}

/** Makes database `name` owned by `group` unless it exists; refuses one of that name owned by anyone else. */
async function ensureDatabase(c: pg.PoolClient, name: string, group: string): Promise<void> {
  let owner = await databaseOwner(c, name);
  if (owner === undefined) {
    try {
      await c.query(`CREATE DATABASE ${qi(name)} OWNER ${qi(group)}`); // never inside a transaction
    } catch (e) {
      if (!isDuplicate(e)) throw e;
    }
    owner = await databaseOwner(c, name);
  }
  if (owner !== group) {
    throw new MeshError(
      ErrorCodes.Conflict,
      `PostgreSQL database ${name} already exists and is owned by ${owner ?? "nobody"}, not by the mesh's role ${group}; drop or rename that database, or rename the requirement`,
    );
  }
  // Only the grant's roles may connect (PUBLIC may, by default).
  await c.query(`REVOKE ALL ON DATABASE ${qi(name)} FROM PUBLIC`);
}

/** True when `e` says the server could not be reached or is not accepting connections now. */
function isUnreachable(e: unknown): boolean {
  const err = e as PgError;
  const code = err?.code ?? "";
  if (hasNetworkCode(e) || code.startsWith("08") || code.startsWith("57P") || code === "53300") return true;
  if (Array.isArray(err?.errors) && err.errors.some(isUnreachable)) return true;
  return /timeout|Connection terminated/i.test(errorMessage(e));
}

function classifyLogin(e: unknown, where: string, user: string, database: string): LoginResult {
  const code = (e as PgError).code ?? "";
  const why = errorMessage(e) || code;
  const tls = unverifiedLogin(`PostgreSQL at ${where}`, e);
  if (tls) return tls;
  if (code === "3D000") return { ok: false, reason: "missing", message: `database ${database} does not exist at ${where}` };
  if (code === "28000" && /does not exist/.test(why)) return { ok: false, reason: "missing", message: `role ${user} does not exist at ${where}` };
  if (code.startsWith("28") || code === "42501" || /SASL|SCRAM/.test(why)) {
    return { ok: false, reason: "rejected", message: `PostgreSQL at ${where} rejected ${user}: ${why}` };
  }
  return { ok: false, reason: "unreachable", message: `cannot log in to PostgreSQL at ${where}: ${why}` };
}
