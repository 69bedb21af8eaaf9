/**
 * The adapter of kind `redis.user`: one Redis ACL user per grant, made through the provider's
 * admin connection (Redis 7.0 or later).
 *
 * Layout per grant (names and rules in redis-acl.ts): user `mesh.<module>.<requirement>` with
 * keys `~<module>:*`, channels `&<module>:*` and every command but the dangerous ones and those
 * that act on state all tenants share. Overlap (docs/design.md, "Overlap per backend"): an ACL user
 * holds several passwords, so generation k+1 is a second password of the same user beside k's.
 * Redis keeps only SHA-256 hashes without a label, so the user carries the mesh's record in a
 * selector that allows nothing: the mark `<module>/<requirement>` (a user of that name without
 * it is never taken over) and which generation each hash belongs to. Every change rewrites the
 * whole user in one `ACL SETUSER … reset …`, so the result depends on the request alone, inside
 * MULTI/EXEC under WATCH of a counter key, so two provisioners racing converge. Passwords go as
 * `#<sha256>`: the plaintext never reaches the server, and never appears in an error message.
 *
 * Each operation uses a connection of its own: WATCH is per connection, and Redis connections
 * are cheap. When the server has an ACL file, the users are saved to it after every change, so
 * a restart keeps them; otherwise they live in memory until a restart, and the verifier's repair
 * makes them again.
 *
 * A provider with `tls:` (endpoint `rediss://`) is reached over TLS alone, every connection
 * verifying the server (provider-tls.ts); its bindings carry a `rediss://` uri and the bundle
 * as `ca.crt`, and a login is made the way its binding says.
 */
import { Redis } from "ioredis";
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
  ServerTls,
  RetireRequest,
  SetAdminPasswordRequest,
} from "./adapter.js";
import { checkGrantRef } from "./grant-ref.js";
import { generatePassword, passwordOf } from "./password.js";
import { parseEndpoint } from "./endpoint.js";
import { aclRules, parseAclUser, passwordHash, redisNames, type AclRecord, type AclUser, type RedisNames } from "./redis-acl.js";
import { slotOf } from "./alternating.js";
import { bindingCa, caBindings, unverifiedLogin, unverifiedServer, verifyingOptions, trustsResource } from "./provider-tls.js";

/** How long a {@link ProviderAdapter.login} may take to connect, and then each of AUTH and PING. */
const LOGIN_TIMEOUT_MS = 3_000;
/** How long the admin connection may take to connect, and then each command. */
const ADMIN_TIMEOUT_MS = 5_000;
/** How often a change is tried again when another provisioner changed the user in between. */
const MAX_ATTEMPTS = 5;

/** Makes the `redis.user` adapter of `provider`; throws `ProviderMisconfigured` for a bad endpoint. */
export const createRedisAdapter: AdapterFactory = (provider) => new RedisAdapter(provider);

interface Endpoint {
  host: string;
  port: number;
  /** `rediss://`: the server speaks TLS. */
  secure?: boolean;
  /** What every connection verifies the server with; none for `redis://`. */
  tls?: ServerTls;
}

class RedisAdapter implements ProviderAdapter {
  readonly kinds = [Kinds.RedisUser] as const;
  private readonly endpoint: Endpoint;

  constructor(private readonly provider: ProviderConfig) {
    this.endpoint = endpointOf(provider);
  }

  generate() {
    return generatePassword();
  }

  async observe(req: ObserveRequest): Promise<ObserveResult> {
    const { names, generation } = grantNames(req.grant);
    return this.admin(`observe ${names.mark}`, async (c) => {
      const user = await readUser(c, names.user);
      const details: Record<string, string> = {};
      if (!user) return { exists: false, details };
      if (user.record.grant !== names.mark) return { exists: false, details: { conflict: conflictOf(names, user.record) } };
      const slot = user.record[slotOf(generation)];
      const hasPassword = slot?.generation === generation && user.passwords.includes(slot.hash);
      details.user = names.user;
      details.keyPrefix = names.keyPrefix;
      if (!user.flags.includes("on")) details.userLogin = "disabled";
      if (!hasPassword) details.password = `generation ${generation} has none`;
      return { exists: hasPassword, details };
    });
  }

  async create(req: CreateRequest): Promise<CreateResult> {
    const { names, generation } = grantNames(req.grant);
    const password = passwordOf(req);
    const hash = passwordHash(password);
    await this.admin(`create ${names.mark}`, (c) =>
      change(c, names, (user) => {
        if (user && user.record.grant !== names.mark) {
          throw new MeshError(
            ErrorCodes.Conflict,
            `${conflictOf(names, user.record)}; delete or rename that user (ACL DELUSER ${names.user}), or rename the requirement`,
          );
        }
        // Only this generation's slot changes: the other one holds the generation before it, still in use.
        return { ...user?.record, grant: names.mark, [slotOf(generation)]: { generation, hash } };
      }),
    );
    const { host, port } = this.endpoint;
    const hostInUri = host.includes(":") ? `[${host}]` : host;
    const enc = encodeURIComponent;
    return {
      resource: { user: names.user, keyPrefix: names.keyPrefix, ...trustsResource(this.endpoint.tls) },
      bindings: {
        type: "redis",
        provider: this.provider.name,
        host,
        port: String(port),
        username: names.user,
        password,
        // Binding keys are file names: lower case (servicebinding.io), hence not keyPrefix.
        "key-prefix": names.keyPrefix,
        uri: `${this.endpoint.tls ? "rediss" : "redis"}://${enc(names.user)}:${enc(password)}@${hostInUri}:${port}`,
        ...caBindings(this.endpoint.tls),
      },
    };
  }

  /**
   * Deletes the user, record and all; Redis ends its connections. The keys under `<module>:`
   * stay: the prefix is the module's, shared with its other `redis.user` grants.
   */
  async delete(req: DeleteRequest): Promise<void> {
    checkGrantRef(req.grant);
    const names = redisNames(req.grant.module, req.grant.requirement);
    await this.admin(`delete ${names.mark}`, (c) => change(c, names, (user) => (user?.record.grant === names.mark ? "delete" : undefined)));
  }

  /**
   * Removes generation `req.grant.generation`'s password, if its slot still holds that
   * generation (not a later one that took the slot). Connections already open stay open: Redis
   * cannot tell which password a connection used, and `CLIENT KILL USER` would end the next
   * generation's holders too, on the same user. A holder that authenticated with the retired
   * password has the same rights as the next generation's, and every holder has confirmed the
   * next one before the rotator retires, so nothing is gained by ending them.
   */
  async retire(req: RetireRequest): Promise<void> {
    const { names, generation } = grantNames(req.grant);
    const slot = slotOf(generation);
    await this.admin(`retire generation ${generation} of ${names.mark}`, (c) =>
      change(c, names, (user) => {
        if (user?.record.grant !== names.mark || user.record[slot]?.generation !== generation) return undefined;
        const next = { ...user.record, grant: names.mark };
        delete next[slot];
        return next;
      }),
    );
  }

  async login(req: LoginRequest): Promise<LoginResult> {
    const b = req.bindings;
    const lacking = ["host", "port", "username", "password"].filter((k) => !b[k]);
    if (lacking.length > 0) return { ok: false, reason: "rejected", message: `the binding lacks ${lacking.join(", ")}` };
    const where = `${b.host}:${b.port}`;
    let c: Redis | undefined;
    try {
      const tls = bindingCa(b);
      c = await open({ host: b.host!, port: Number(b.port), ...(tls ? { tls } : {}) }, LOGIN_TIMEOUT_MS);
      await c.call("AUTH", b.username!, b.password!);
      await c.ping();
      return { ok: true };
    } catch (e) {
      // Redis says WRONGPASS alike for a wrong password, a disabled user and one that does not exist.
      if (["WRONGPASS", "NOPERM"].includes(replyCode(e) ?? "")) {
        return { ok: false, reason: "rejected", message: `Redis at ${where} rejected ${b.username}: ${errorMessage(e)}` };
      }
      return (
        unverifiedLogin(`Redis at ${where}`, e, Boolean(b["ca.crt"])) ?? {
          ok: false,
          reason: "unreachable",
          message: `cannot log in to Redis at ${where}: ${errorMessage(e)}`,
        }
      );
    } finally {
      c?.disconnect();
    }
  }

  /** AUTH as the admin user (`default` when the document names none) with `req.password`; never mutates. */
  async loginAdmin(req: AdminLoginRequest): Promise<LoginResult> {
    const { host, port, tls } = this.endpoint;
    return this.login({ bindings: { host, port: String(port), username: this.adminUser(), password: req.password, ...caBindings(tls) } });
  }

  /**
   * `ACL SETUSER <admin> resetpass #<sha256 of next>` on a connection authenticated with
   * `req.current` (the plaintext never reaches the server), then saved where the server keeps its
   * users: its ACL file, or else its configuration file (`CONFIG REWRITE`), so a restart keeps the
   * new password. A server with neither keeps it until a restart, and the verifier sets it again.
   */
  async setAdminPassword(req: SetAdminPasswordRequest): Promise<void> {
    const user = this.adminUser();
    const what = `set the admin user ${JSON.stringify(user)}'s password`;
    let c: Redis | undefined;
    try {
      c = await this.openAdmin();
      await c.call("AUTH", user, req.current);
      await c.call("ACL", "SETUSER", user, "resetpass", `#${passwordHash(req.next)}`);
      await persistUsers(c);
    } catch (e) {
      // Set already (by another instance, or a run that died after it): nothing to do.
      if (replyCode(e) === "WRONGPASS" && (await this.loginAdmin({ password: req.next })).ok) return;
      throw this.adminError(what, e);
    } finally {
      c?.disconnect();
    }
  }

  async close(): Promise<void> {
    // Nothing held: every operation closes its own connection.
  }

  /** The admin user's name: the document's, or Redis' `default` (what `requirepass` sets). */
  private adminUser(): string {
    return this.provider.admin?.username ?? "default";
  }

  /** A connection for the admin, verifying the server when the endpoint is `rediss://`. */
  private openAdmin(): Promise<Redis> {
    // A login-only adapter (an agent's, made from the document alone) has no tls: its logins take the binding's.
    if (this.endpoint.secure && !this.endpoint.tls) {
      throw new MeshError(
        ErrorCodes.ProviderMisconfigured,
        `provider ${this.provider.name}: endpoint ${this.provider.endpoint} is rediss:// (TLS), but the provider says no tls to verify the server with; give tls.ca (the bundle that signs its certificate) or tls: { mesh: true }`,
      );
    }
    return open(this.endpoint, ADMIN_TIMEOUT_MS);
  }

  /** Runs `fn` on a new admin connection; maps every failure to a MeshError that says what to do. */
  private async admin<T>(what: string, fn: (c: Redis) => Promise<T>): Promise<T> {
    let c: Redis | undefined;
    try {
      c = await this.openAdmin();
      const admin = this.provider.admin;
      // A user with `nopass` accepts any password, so a missing one is sent as empty.
      if (admin) await c.call("AUTH", admin.username, admin.password ?? "");
      return await fn(c);
    } catch (e) {
      throw this.adminError(what, e);
    } finally {
      c?.disconnect();
    }
  }

  private adminError(what: string, e: unknown): MeshError {
    if (e instanceof MeshError) return e;
    const cause = withoutArguments(e);
    const at = `Redis provider ${this.provider.name} at ${this.provider.endpoint}`;
    const why = errorMessage(e) || "unknown error";
    const code = replyCode(e);
    const adminUser = JSON.stringify(this.provider.admin?.username ?? "default");
    const tls = unverifiedServer(at, what, cause, Boolean(this.endpoint.tls));
    if (tls) return tls;
    if (isUnreachable(e)) {
      return new MeshError(
        ErrorCodes.ProviderUnreachable,
        `${at} is unreachable (${why}), so could not ${what}; check that the server runs, listens on that address and accepts connections from this node`,
        { retryable: true, cause },
      );
    }
    if (code === "WRONGPASS") {
      return new MeshError(
        ErrorCodes.ProviderMisconfigured,
        `${at} rejected the admin user ${adminUser} (${why}), so could not ${what}; check admin.username and the password given by the provider's admin.passwordEnv or admin.passwordFile`,
        { cause },
      );
    }
    if (code === "NOAUTH") {
      return new MeshError(
        ErrorCodes.ProviderMisconfigured,
        `${at} requires authentication, so could not ${what}; give the provider admin.username and admin.passwordEnv or admin.passwordFile`,
        { cause },
      );
    }
    if (code === "NOPERM") {
      return new MeshError(
        ErrorCodes.ProviderMisconfigured,
        `${at}: the admin user ${adminUser} lacks a permission to ${what} (${why}); it needs the ACL commands, CONFIG GET, MULTI/EXEC/WATCH and the keys _mesh:*`,
        { cause },
      );
    }
    // A server loading its data, busy with a script, or a replica cut off from its primary: passes.
    const retryable = ["LOADING", "BUSY", "TRYAGAIN", "MASTERDOWN"].includes(code ?? "");
    return new MeshError(ErrorCodes.ProviderRejected, `${at} refused to ${what}: ${why}`, { retryable, cause });
  }
}

/** Checks a grant (with its generation) and gives its Redis names; throws before any connection. */
function grantNames(grant: ObserveRequest["grant"]): { names: RedisNames; generation: number } {
  checkGrantRef(grant);
  return { names: redisNames(grant.module, grant.requirement), generation: grant.generation };
}

function conflictOf(names: RedisNames, record: AclRecord): string {
  return record.grant
    ? `Redis ACL user ${names.user} is marked for ${record.grant}, not ${names.mark}`
    : `Redis ACL user ${names.user} already exists and was not made by the mesh for ${names.mark} (it lacks the mesh's record)`;
}

/**
 * Rewrites the user of `names` to what `decide` makes of it as it is (undefined: it does not
 * exist): a record, from which the whole user is made; `"delete"`; or undefined to change
 * nothing. WATCH on the version key makes EXEC fail when another provisioner changed the user
 * in between; then it is read and decided again. (A user made by someone else in that instant is
 * not seen: Redis cannot WATCH an ACL.)
 */
async function change(
  c: Redis,
  names: RedisNames,
  decide: (user: AclUser | undefined) => (AclRecord & { grant: string }) | "delete" | undefined,
): Promise<void> {
  for (let attempt = 1; attempt <= MAX_ATTEMPTS; attempt++) {
    await c.watch(names.versionKey);
    const next = decide(await readUser(c, names.user));
    if (next === undefined) return; // the connection is closed after the operation, and its WATCH with it
    const tx =
      next === "delete"
        ? c.multi().del(names.versionKey).call("ACL", "DELUSER", names.user)
        : c
            .multi()
            .incr(names.versionKey)
            .call("ACL", "SETUSER", names.user, ...aclRules(names, next));
    const results = await tx.exec();
    if (results === null) continue;
    const failed = results.find(([err]) => err);
    if (failed) throw failed[0];
    await saveAcl(c);
    return;
  }
  throw new MeshError(ErrorCodes.ProviderRejected, `Redis ACL user ${names.user} kept changing while ${names.mark} was being changed; try again`, {
    retryable: true,
  });
}

async function readUser(c: Redis, user: string): Promise<AclUser | undefined> {
  return parseAclUser(await c.call("ACL", "GETUSER", user));
}

/** Writes the users to the server's ACL file when it has one, so a restart keeps them. */
async function saveAcl(c: Redis): Promise<void> {
  const [, file] = (await c.call("CONFIG", "GET", "aclfile")) as string[];
  if (file) await c.call("ACL", "SAVE");
}

/**
 * Writes the users where a restart reads them again: the ACL file when the server has one, else
 * its configuration file. A server started without either (all from its command line) has
 * nowhere to keep them, and Redis says so; that is not a failure of the change itself.
 */
async function persistUsers(c: Redis): Promise<void> {
  const [, file] = (await c.call("CONFIG", "GET", "aclfile")) as string[];
  if (file) {
    await c.call("ACL", "SAVE");
    return;
  }
  try {
    await c.call("CONFIG", "REWRITE");
  } catch (e) {
    if (!/without a config file/i.test(errorMessage(e))) throw e;
  }
}

/**
 * A connected client that fails fast instead of retrying: no reconnect, no offline queue, no
 * ready check (INFO is a dangerous command a grant's user may not run). A failed connect fails
 * with its reason as soon as the socket reports it (ioredis rejects only later, on close, with
 * "Connection is closed.").
 */
async function open(endpoint: Endpoint, timeoutMs: number): Promise<Redis> {
  const c = new Redis({
    host: endpoint.host,
    port: endpoint.port,
    ...(endpoint.tls ? { tls: verifyingOptions(endpoint.tls, endpoint.host) } : {}),
    lazyConnect: true,
    enableReadyCheck: false,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    reconnectOnError: () => false,
    connectTimeout: timeoutMs,
    commandTimeout: timeoutMs,
  });
  // Without a listener ioredis logs every error; the command that fails reports it.
  c.on("error", () => {});
  const failed = new Promise<never>((_, reject) => c.once("error", reject));
  failed.catch(() => {}); // an error after connecting is the failing command's to report
  try {
    await Promise.race([c.connect(), failed]);
    return c;
  } catch (e) {
    c.disconnect();
    throw e;
  }
}

/** The error word of a Redis reply error (`WRONGPASS`, `NOPERM` …), that of the first queued command for EXECABORT; undefined for a network error. */
function replyCode(e: unknown): string | undefined {
  if (!(e instanceof Error) || e.name !== "ReplyError") return undefined;
  const previous = (e as Error & { previousErrors?: unknown[] }).previousErrors;
  if (/^EXECABORT/.test(e.message) && previous?.[0]) return replyCode(previous[0]) ?? "EXECABORT";
  return /^[A-Z]+/.exec(e.message)?.[0] ?? "ERR";
}

/** True when `e` says the server could not be reached or did not answer: a socket error or ioredis giving up on one. */
function isUnreachable(e: unknown): boolean {
  if (!(e instanceof Error) || e.name === "ReplyError") return false;
  return (
    typeof (e as NodeJS.ErrnoException).code === "string" ||
    /Connection is closed|Command timed out|ETIMEDOUT|Stream isn't writeable|Protocol error/.test(e.message)
  );
}

/** `e` without the command arguments ioredis attaches to a reply error: AUTH's include a password. */
function withoutArguments(e: unknown): unknown {
  if (e instanceof Error) {
    delete (e as Error & { command?: unknown }).command;
    for (const p of (e as Error & { previousErrors?: unknown[] }).previousErrors ?? []) withoutArguments(p);
  }
  return e;
}

function endpointOf(provider: ProviderConfig): Endpoint {
  const { scheme, host, port } = parseEndpoint(provider, {
    schemes: ["redis", "rediss"],
    example: provider.tls ? "rediss://127.0.0.1:6380" : "redis://127.0.0.1:6379",
    defaultPort: () => 6379,
    refusePath: "names a database; leave it out: a grant's key pattern spans every database, and the mesh keeps its counters in database 0",
  });
  if (provider.tls && scheme !== "rediss") {
    throw new MeshError(
      ErrorCodes.ProviderMisconfigured,
      `provider ${provider.name}: tls is given, but the endpoint is redis://; name the server rediss://host:port`,
    );
  }
  return { host, port, secure: scheme === "rediss", ...(provider.tls ? { tls: provider.tls } : {}) };
}
