/**
 * The adapter of kind `rabbitmq.vhost`: a virtual host and the users that may use it, made
 * through the RabbitMQ management HTTP API (the `rabbitmq_management` plugin, 3.10 or later).
 *
 * Layout per grant (see docs/design.md, "Overlap per backend"): vhost `<base>`; user `<base>_a`
 * serves odd generations and `<base>_b` even ones, both with configure, write and read `.*` on
 * that vhost only and no tag that opens the management UI. RabbitMQ keeps one password per
 * user, so a rotation stages generation k+1 on the other user while k keeps working; queues and
 * exchanges belong to the vhost, not to a user, so either generation uses what the other made.
 * Retiring a generation clears its user's password hash (no password: no login) and closes the
 * user's open connections; staging it again sets the new hash.
 *
 * What the mesh made carries the mark `mesh grant <module>/<requirement>`: a vhost as its
 * description, a user as its only tag (3.10 has no other free-form field on users; tags are
 * free strings, and only the management tags grant anything). An object of the grant's name
 * without the mark is a Conflict and is never taken over. The management API has no
 * create-only PUT, so a foreign object made between our read and our PUT would be overwritten;
 * that window is one round trip, and every PUT is otherwise idempotent, so provisioners racing
 * on the same grant converge.
 *
 * Passwords go as salted SHA-256 hashes (`rabbit_password_hashing_sha256`) computed here: the
 * plaintext never crosses the wire, and never appears in an error message.
 *
 * An admin named `guest` with no `passwordEnv` or `passwordFile` uses RabbitMQ's documented
 * default password of that account, `guest` ({@link GUEST_DEFAULT_PASSWORD}); RabbitMQ lets it in
 * from loopback only, so it serves a broker on the provisioner's own host, as in the example.
 *
 * The management API is a plugin that is off on a fresh install. When nothing listens at
 * `managementUrl` while the AMQP endpoint accepts connections, every admin verb fails with
 * `ProviderUnreachable` naming the command that turns it on (`rabbitmq-plugins enable
 * rabbitmq_management`, which starts it without a restart); the provisioner retries by itself
 * and carries on once it runs. The adapter does not administer the broker through
 * `rabbitmqctl` instead: that needs the node's Erlang cookie on the broker's own host, which is
 * full control of the node (any code run inside it), where the management API gives the admin
 * user's rights, over the network, to a broker anywhere.
 *
 * A provider with `tls:` (an `amqps://` endpoint and an `https://` management URL) is reached
 * over TLS alone, AMQP and the management API both verifying the server against its bundle
 * (provider-tls.ts; the management calls through undici, the library behind Node's fetch, whose
 * agent takes a bundle); its bindings carry the bundle as `ca.crt`, and a login is made the way
 * its binding says.
 */
import { createHash, randomBytes } from "node:crypto";
import { connect as tcpConnect } from "node:net";
import amqplib from "amqplib";
import { ErrorCodes, Kinds, MeshError, errorMessage, isMeshError } from "@mesh/shared";
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
import { grantBaseName } from "./grant-base-name.js";
import { checkGrantRef } from "./grant-ref.js";
import { generatePassword, passwordOf } from "./password.js";
import { parseEndpoint } from "./endpoint.js";
import { fetchFailureCause } from "./fetch-failure.js";
import { slotName } from "./alternating.js";
import { bindingCa, caBindings, trustsResource, unverifiedLogin, unverifiedServer, verifyingFetch, verifyingOptions } from "./provider-tls.js";

/** How long a {@link ProviderAdapter.login} may leave the socket idle while connecting. */
export const LOGIN_TIMEOUT_MS = 3_000;
/** How long one management API request may take. */
export const ADMIN_TIMEOUT_MS = 5_000;
/**
 * Pause between the two sweeps of a retire. RabbitMQ tracks a new connection a few ms after it
 * opened (1-5 ms measured on 3.10), so one that authenticated just before its password went is
 * closed by the second sweep.
 */
export const RETIRE_SWEEP_DELAY_MS = 200;
/** Port of an `amqp://` endpoint that names none (`amqps://`: 5671). */
export const DEFAULT_PORT = 5672;

/**
 * Longest base name. RabbitMQ has no tight limit (a vhost travels as an AMQP shortstr, 255
 * bytes); 100 holds every mapped mesh name, so none is ever shortened.
 */
export const MAX_BASE_LENGTH = 100;

/** The names the adapter accepts for vhosts and users: lower case, digits and `_`. */
export const RABBITMQ_NAME = /^[a-z][a-z0-9_]{0,101}$/;

/** The password hashing the management API is told the hashes use. */
export const HASHING_ALGORITHM = "rabbit_password_hashing_sha256";

/** RabbitMQ's documented password of its built-in `guest` user, used when the admin is `guest` and names no password. */
export const GUEST_DEFAULT_PASSWORD = "guest";

/** The command that turns the management API on, on the broker's host; it starts at once, without a restart. */
export const ENABLE_MANAGEMENT_COMMAND = "rabbitmq-plugins enable rabbitmq_management";

/** How long the check of the AMQP port may take when the management API refused a connection. */
const AMQP_PROBE_TIMEOUT_MS = 1_000;

/** The provider options this adapter reads. */
const KNOWN_OPTIONS = ["managementUrl"];

/** Makes the `rabbitmq.vhost` adapter of `provider`; throws `ProviderMisconfigured` for what it cannot use. */
export const createRabbitmqAdapter: AdapterFactory = (provider) => new RabbitmqAdapter(provider);

/** All RabbitMQ names of a grant. */
export interface RabbitmqNames {
  vhost: string;
  /** Both users, generation-odd first. */
  users: readonly [string, string];
}

/** Throws MeshError `InvalidName` unless `name` matches {@link RABBITMQ_NAME}; returns `name`. */
function checkName(name: string, what: string): string {
  if (!RABBITMQ_NAME.test(name)) {
    throw new MeshError(
      ErrorCodes.InvalidName,
      `RabbitMQ ${what} ${JSON.stringify(name)} is refused: it must be 1-102 characters of lower-case letters, digits and _, starting with a letter`,
    );
  }
  return name;
}

/** The user of `generation` under `base`: `<base>_a` for odd generations, `<base>_b` for even ones. */
export function rabbitmqUserName(base: string, generation: number): string {
  return checkName(slotName(base, generation), "user name");
}

/**
 * The names of grant `module/requirement`: vhost `<base>` and users `<base>_a`, `<base>_b`,
 * where `<base>` is {@link grantBaseName} (`shop/db` → `shop_db`, as on every SQL backend).
 * The grant's names must have passed {@link checkGrantRef}.
 */
export function rabbitmqNames(module: string, requirement: string): RabbitmqNames {
  const vhost = checkName(grantBaseName(module, requirement, MAX_BASE_LENGTH), "vhost name");
  return { vhost, users: [rabbitmqUserName(vhost, 1), rabbitmqUserName(vhost, 2)] };
}

/**
 * The hash RabbitMQ stores for `password` with `rabbit_password_hashing_sha256`: base64 of a
 * 4-byte salt followed by SHA-256(salt ‖ UTF-8 password). A fresh random salt unless one is given.
 */
export function rabbitmqPasswordHash(password: string, salt: Buffer = randomBytes(4)): string {
  const digest = createHash("sha256").update(salt).update(password, "utf8").digest();
  return Buffer.concat([salt, digest]).toString("base64");
}

/** An HTTP Basic `authorization` header value. */
const basicAuthorization = (user: string, password: string) => `Basic ${Buffer.from(`${user}:${password}`).toString("base64")}`;

/** The mark of what the mesh made for a grant: a vhost's description, a user's one tag. */
const markOf = (module: string, requirement: string) => `mesh grant ${module}/${requirement}`;

/** What the management API says of a vhost (3.10 has the description at the top and in `metadata`). */
interface VhostInfo {
  name: string;
  description?: string;
  metadata?: { description?: string };
}

/** What the management API says of a user; `tags` is a list on 3.10, one comma-separated string on older servers. */
interface UserInfo {
  name: string;
  password_hash?: string;
  tags?: string[] | string;
}

const descriptionOf = (v: VhostInfo) => v.description ?? v.metadata?.description ?? "";
const tagsOf = (u: UserInfo) => (Array.isArray(u.tags) ? u.tags : (u.tags ?? "").split(",").filter((t) => t !== ""));
/** True when user `u` carries the grant's mark among its tags. */
const isMarked = (u: UserInfo, mark: string) => tagsOf(u).includes(mark);
/**
 * A user's second tag says which generation it serves (`mesh generation 3`), so a late retire
 * of generation 1 leaves alone the user that generation 3 uses again. Tags grant nothing but the
 * management ones; each distinct tag is an atom the broker keeps, one per generation number.
 */
const servingTag = (generation: number) => `mesh generation ${generation}`;
/** The generation user `u` serves, from its tags; undefined when none says. */
const servedGeneration = (u: UserInfo) => {
  const t = tagsOf(u).find((x) => /^mesh generation \d+$/.test(x));
  return t === undefined ? undefined : Number(t.slice("mesh generation ".length));
};

/** A management API request answered with an error status: the cause of the MeshError thrown. */
class ApiRefusal extends Error {
  constructor(
    readonly status: number,
    readonly reason: string,
  ) {
    super(`HTTP ${status} ${reason}`);
  }
}

interface Endpoint {
  protocol: "amqp" | "amqps";
  host: string;
  port: number;
  /** What every connection verifies the server with; none without the provider's `tls:`. */
  tls?: ServerTls;
}

/** The management API's error body: `{"error": "...", "reason": "..."}`. */
interface ApiError {
  error?: string;
  reason?: string;
}

class RabbitmqAdapter implements ProviderAdapter {
  readonly kinds = [Kinds.RabbitmqVhost] as const;
  private readonly endpoint: Endpoint;
  /** The management API's base, `<managementUrl>/api`. */
  private readonly api: string;
  private readonly adminUser: string = "";
  private readonly authorization: string = "";
  /** True when the admin is `guest` with RabbitMQ's default password, named by no env var or file. */
  private readonly guestDefault: boolean = false;
  /**
   * Why the management API cannot be used, thrown by every admin verb. An agent makes
   * login-only adapters from the document without the admin's password, so it is not
   * thrown here; its logins then cannot tell a missing vhost from a refused one.
   */
  private readonly managementProblem: MeshError | undefined;

  constructor(private readonly provider: ProviderConfig) {
    this.endpoint = endpointOf(provider);
    this.api = "";
    try {
      this.api = `${parseManagementUrl(provider)}/api`;
      const admin = provider.admin;
      const password = admin?.password ?? (admin?.username === "guest" ? GUEST_DEFAULT_PASSWORD : undefined);
      this.adminUser = admin?.username ?? "";
      if (!admin?.username || password === undefined) {
        throw new MeshError(
          ErrorCodes.ProviderMisconfigured,
          `provider ${provider.name}: the RabbitMQ management API needs an admin user with the administrator tag; set admin.username and admin.passwordEnv or admin.passwordFile (or admin.username guest alone, for RabbitMQ's default guest/guest on this host)`,
        );
      }
      this.guestDefault = admin.password === undefined;
      this.authorization = basicAuthorization(admin.username, password);
    } catch (e) {
      if (!isMeshError(e)) throw e;
      this.managementProblem = e;
    }
  }

  generate() {
    return generatePassword();
  }

  async observe(req: ObserveRequest): Promise<ObserveResult> {
    const { names, user, mark, what } = grantNames(req.grant, "observe");
    const [vhost, info, permission] = await Promise.all([
      this.get<VhostInfo>(what, vhostPath(names.vhost)),
      this.get<UserInfo>(what, userPath(user)),
      this.get<unknown>(what, permissionPath(names.vhost, user)),
    ]);
    const details: Record<string, string> = {};
    const conflicts: string[] = [];
    const vhostOk = vhost !== undefined && descriptionOf(vhost) === mark;
    const userOk = info !== undefined && isMarked(info, mark);
    if (vhost && !vhostOk) conflicts.push(`vhost ${names.vhost} exists but is not the mesh's for ${req.grant.module}/${req.grant.requirement}`);
    if (info && !userOk) conflicts.push(`user ${user} exists but is not the mesh's for ${req.grant.module}/${req.grant.requirement}`);
    if (vhostOk) details.vhost = names.vhost;
    if (userOk) {
      details.user = user;
      if (!info.password_hash) details.userLogin = "disabled";
      if (permission === undefined) details.permissions = `none on ${names.vhost}`;
    }
    if (conflicts.length > 0) details.conflict = conflicts.join("; ");
    return { exists: vhostOk && userOk && permission !== undefined, details };
  }

  async create(req: CreateRequest): Promise<CreateResult> {
    const { names, user, mark, what } = grantNames(req.grant, "create");
    const password = passwordOf(req);
    // Each read refuses an object of the grant's name without the grant's mark.
    const readVhost = async () => {
      const vhost = await this.get<VhostInfo>(what, vhostPath(names.vhost));
      if (vhost && descriptionOf(vhost) !== mark) {
        throw new MeshError(
          ErrorCodes.Conflict,
          `RabbitMQ vhost ${names.vhost} already exists and was not made by the mesh for this grant (its description is ${JSON.stringify(descriptionOf(vhost))}, expected ${JSON.stringify(mark)}); delete or rename that vhost, or rename the requirement`,
        );
      }
      return vhost;
    };
    const readUser = async () => {
      const info = await this.get<UserInfo>(what, userPath(user));
      if (info && !isMarked(info, mark)) {
        throw new MeshError(
          ErrorCodes.Conflict,
          `RabbitMQ user ${user} already exists and was not made by the mesh for this grant (its tags are ${JSON.stringify(tagsOf(info))}, expected ${JSON.stringify([mark])}); delete or rename that user, or rename the requirement`,
        );
      }
      return info;
    };
    const [vhost] = await Promise.all([readVhost(), readUser()]);
    if (!vhost) await this.put(what, vhostPath(names.vhost), { description: mark }, readVhost);
    // The user first, then its permissions: without them it can authenticate but open nothing.
    const hash = rabbitmqPasswordHash(password);
    await this.put(
      what,
      userPath(user),
      { password_hash: hash, hashing_algorithm: HASHING_ALGORITHM, tags: [mark, servingTag(req.grant.generation)] },
      readUser,
    );
    await this.send(what, "PUT", permissionPath(names.vhost, user), { configure: ".*", write: ".*", read: ".*" });
    const { protocol, host, port } = this.endpoint;
    const hostInUri = host.includes(":") ? `[${host}]` : host;
    const enc = encodeURIComponent;
    return {
      resource: { vhost: names.vhost, user, ...trustsResource(this.endpoint.tls) },
      bindings: {
        type: "rabbitmq",
        provider: this.provider.name,
        host,
        port: String(port),
        vhost: names.vhost,
        username: user,
        password,
        uri: `${protocol}://${enc(user)}:${enc(password)}@${hostInUri}:${port}/${enc(names.vhost)}`,
        ...caBindings(this.endpoint.tls),
      },
    };
  }

  async delete(req: DeleteRequest): Promise<void> {
    const { names, mark, what } = grantNames({ ...req.grant, generation: 1 }, "delete");
    const [vhost, ...users] = await Promise.all([
      this.get<VhostInfo>(what, vhostPath(names.vhost)),
      ...names.users.map((u) => this.get<UserInfo>(what, userPath(u))),
    ]);
    // Only what carries the grant's mark goes; anything else of that name is left alone.
    // Deleting a vhost closes the connections to it, deleting a user those of the user.
    if (vhost && descriptionOf(vhost) === mark) await this.remove(what, vhostPath(names.vhost));
    await Promise.all(users.map((u) => (u && isMarked(u, mark) ? this.remove(what, userPath(u.name)) : undefined)));
  }

  /**
   * Retires the user of `req.grant.generation`: its password hash is cleared, so it cannot log
   * in, then its open connections are closed, twice (see {@link RETIRE_SWEEP_DELAY_MS}). Only a
   * user carrying the grant's mark is touched; a missing one is fine.
   */
  async retire(req: RetireRequest): Promise<void> {
    const { user, mark, what } = grantNames(req.grant, `retire generation ${req.grant.generation} of`);
    const info = await this.get<UserInfo>(what, userPath(user));
    if (!info || !isMarked(info, mark)) return;
    // The user serves a later generation now (k+2 uses k's user again): this retire is stale.
    if ((servedGeneration(info) ?? 0) > req.grant.generation) return;
    await this.send(what, "PUT", userPath(user), { password_hash: "", tags: tagsOf(info) });
    const close = () =>
      this.send(what, "DELETE", `/connections/username/${encodeURIComponent(user)}`, undefined, { "X-Reason": "credential generation retired by the mesh" });
    await close();
    await new Promise((r) => setTimeout(r, RETIRE_SWEEP_DELAY_MS));
    await close();
  }

  async login(req: LoginRequest): Promise<LoginResult> {
    const b = req.bindings;
    const lacking = ["host", "port", "vhost", "username", "password"].filter((k) => !b[k]);
    if (lacking.length > 0) return { ok: false, reason: "rejected", message: `the binding lacks ${lacking.join(", ")}` };
    const where = `${b.host}:${b.port}`;
    const tls = bindingCa(b);
    let conn: amqplib.ChannelModel | undefined;
    try {
      conn = await amqplib.connect(
        {
          protocol: b.uri?.startsWith("amqps:") || tls ? "amqps" : "amqp",
          hostname: b.host!,
          port: Number(b.port),
          username: b.username!,
          password: b.password!,
          vhost: b.vhost!,
          heartbeat: 0,
        },
        { timeout: LOGIN_TIMEOUT_MS, ...(tls ? verifyingOptions(tls, b.host!) : {}) },
      );
      conn.on("error", () => {}); // a late socket error must not crash the process
      return { ok: true };
    } catch (e) {
      return unverifiedLogin(`RabbitMQ at ${where}`, e, Boolean(tls)) ?? this.classifyLogin(e, where, b.username!, b.vhost!);
    } finally {
      await conn?.close().catch(() => {});
    }
  }

  /**
   * Asks the management API who `admin.username` is, with `req.password`; never mutates. A
   * refusal is `rejected`; a broker that does not answer (or whose management plugin is off) is
   * `unreachable`.
   */
  async loginAdmin(req: AdminLoginRequest): Promise<LoginResult> {
    const user = this.provider.admin?.username;
    if (!user) return { ok: false, reason: "rejected", message: `provider ${this.provider.name} names no admin.username` };
    // A management URL it cannot use says nothing of the password: no login was tried.
    if (this.api === "" && this.managementProblem) return { ok: false, reason: "unreachable", message: this.managementProblem.message };
    try {
      await this.request("log in as the admin user", "GET", "/whoami", undefined, {}, basicAuthorization(user, req.password));
      return { ok: true };
    } catch (e) {
      if (isMeshError(e, ErrorCodes.ProviderMisconfigured)) return { ok: false, reason: "rejected", message: errorMessage(e) };
      return { ok: false, reason: "unreachable", message: errorMessage(e) };
    }
  }

  /**
   * Sets the admin user's password hash (computed here, as for every user) through the
   * management API, authenticated with `req.current`; its tags stay as they are. Connections
   * open with the old password stay open.
   */
  async setAdminPassword(req: SetAdminPasswordRequest): Promise<void> {
    const user = this.provider.admin?.username;
    if (!user) throw new MeshError(ErrorCodes.ProviderMisconfigured, `provider ${this.provider.name} names no admin.username whose password could be set`);
    const what = `set the admin user ${JSON.stringify(user)}'s password`;
    const authorization = basicAuthorization(user, req.current);
    try {
      const info = await this.request<UserInfo>(what, "GET", userPath(user), undefined, {}, authorization);
      if (!info) throw new MeshError(ErrorCodes.ProviderMisconfigured, `${this.at()} has no user ${JSON.stringify(user)}, so could not ${what}`);
      await this.request(
        what,
        "PUT",
        userPath(user),
        { password_hash: rabbitmqPasswordHash(req.next), hashing_algorithm: HASHING_ALGORITHM, tags: tagsOf(info) },
        {},
        authorization,
      );
    } catch (e) {
      // Set already (by another instance, or a run that died after it): nothing to do.
      if (isMeshError(e, ErrorCodes.ProviderMisconfigured) && (await this.loginAdmin({ password: req.next })).ok) return;
      throw e;
    }
  }

  async close(): Promise<void> {
    // Nothing held: every management call is a request of its own (through a pool of provider-tls.ts, shared).
  }

  /**
   * The server's `connection.close` during the handshake loses its reply text in amqplib, so
   * "vhost not found" and "access to vhost refused" (both 530 NOT_ALLOWED, after the password
   * was accepted) are told apart by asking the management API whether the vhost exists.
   */
  private async classifyLogin(e: unknown, where: string, user: string, vhost: string): Promise<LoginResult> {
    const why = errorMessage(e);
    if (/ACCESS[-_]REFUSED|\b403\b/.test(why)) {
      return { ok: false, reason: "rejected", message: `RabbitMQ at ${where} rejected ${user}: ${why}` };
    }
    if (/ConnectionClose/.test(why)) {
      let exists: boolean | undefined;
      // A binding is not trusted as a path: only a name the mesh could have made is looked up.
      if (RABBITMQ_NAME.test(vhost)) {
        exists = await this.get<VhostInfo>(`look up vhost ${vhost}`, vhostPath(vhost)).then(
          (v) => v !== undefined,
          () => undefined,
        );
      }
      if (exists === false) return { ok: false, reason: "missing", message: `vhost ${vhost} does not exist at ${where}` };
      return {
        ok: false,
        reason: "rejected",
        message: `RabbitMQ at ${where} accepted ${user}'s password but refused it vhost ${vhost}${exists === undefined ? " (whether the vhost exists is unknown)" : ""}`,
      };
    }
    return { ok: false, reason: "unreachable", message: `cannot log in to RabbitMQ at ${where}: ${why}` };
  }

  /** GETs `path` of the management API; undefined when it is not there (404). */
  private async get<T>(what: string, path: string): Promise<T | undefined> {
    return this.request<T>(what, "GET", path);
  }

  /** PUTs or DELETEs `path`; a DELETE of what is gone (404) succeeds. */
  private async send(what: string, method: "PUT" | "DELETE", path: string, body?: unknown, headers: Record<string, string> = {}): Promise<void> {
    await this.request(what, method, path, body, headers);
  }

  /**
   * PUTs `body` at `path`, which creates or updates. A PUT that creates checks, then adds: the
   * loser of two racing creators gets HTTP 400 `…_already_exists` (seen on 3.10). Then `read`
   * checks the mark of what the winner made, and the PUT, now an update, converges it.
   */
  private async put(what: string, path: string, body: unknown, read: () => Promise<unknown>): Promise<void> {
    try {
      await this.send(what, "PUT", path, body);
    } catch (e) {
      if (!(isMeshError(e) && e.cause instanceof ApiRefusal && /already_exists/.test(e.cause.reason))) throw e;
      await read();
      await this.send(what, "PUT", path, body);
    }
  }

  /**
   * DELETEs the vhost or user at `path`. Two provisioners deleting the same user at once get
   * HTTP 500 with an empty body from the loser (seen on 3.10), so a failed delete of what is
   * gone since succeeds.
   */
  private async remove(what: string, path: string): Promise<void> {
    try {
      await this.send(what, "DELETE", path);
    } catch (e) {
      if (!isMeshError(e, ErrorCodes.ProviderRejected) || (await this.get(what, path)) !== undefined) throw e;
    }
  }

  /**
   * One management API request, as the provider's admin (or with `authorization`, the admin
   * verbs' own login); maps every failure to a MeshError that says what to do.
   */
  private async request<T>(
    what: string,
    method: string,
    path: string,
    body?: unknown,
    headers: Record<string, string> = {},
    authorization?: string,
  ): Promise<T | undefined> {
    // With a login of its own, only a management URL it cannot use stands in the way.
    if (this.managementProblem && (authorization === undefined || this.api === "")) throw this.managementProblem;
    let res: Response;
    try {
      const init = {
        method,
        headers: { authorization: authorization ?? this.authorization, ...(body === undefined ? {} : { "content-type": "application/json" }), ...headers },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        signal: AbortSignal.timeout(ADMIN_TIMEOUT_MS),
      };
      res = await verifyingFetch(`${this.api}${path}`, init, this.endpoint.tls);
    } catch (e) {
      const tls = unverifiedServer(this.at(), what, e, Boolean(this.endpoint.tls));
      if (tls) throw tls;
      const why = fetchFailureCause(e, ADMIN_TIMEOUT_MS);
      if (why === "ECONNREFUSED" && (await acceptsConnections(this.endpoint.host, this.endpoint.port))) throw this.managementOff(what, e);
      throw this.unreachable(what, why, e);
    }
    const text = await res.text().catch(() => "");
    if (res.ok) {
      try {
        return text === "" ? undefined : (JSON.parse(text) as T);
      } catch (e) {
        throw new MeshError(
          ErrorCodes.ProviderRejected,
          `${this.at()} answered ${what} with something that is not JSON; check that options.managementUrl points at the management plugin`,
          { cause: e },
        );
      }
    }
    if (res.status === 404 && method !== "PUT") return undefined;
    let reason = "";
    try {
      const err = JSON.parse(text) as ApiError;
      reason = [err.error, err.reason].filter(Boolean).join(": ");
    } catch {
      // not JSON: a proxy's page, say; the status says enough
    }
    // A reason echoes names only, never a request body, but is kept short all the same.
    const why = `HTTP ${res.status}${reason ? ` ${reason.slice(0, 200)}` : ""}`;
    if (res.status === 401 || res.status === 403) {
      const login = /login failed/i.test(reason) || reason === "";
      throw new MeshError(
        ErrorCodes.ProviderMisconfigured,
        login && this.guestDefault
          ? `${this.at()} rejected guest with RabbitMQ's default password (${why}), so could not ${what}; guest's password was changed, or the provisioner does not reach the broker over loopback (RabbitMQ lets guest in from localhost only): name an administrator in admin.username and its password in admin.passwordEnv or admin.passwordFile`
          : login
            ? `${this.at()} rejected the admin user ${JSON.stringify(this.adminUser)} (${why}), so could not ${what}; check admin.username and the password given by the provider's admin.passwordEnv or admin.passwordFile (RabbitMQ lets guest in from localhost only)`
            : `${this.at()}: the admin user ${JSON.stringify(this.adminUser)} may not ${what} (${why}); give it the administrator tag, or name another user in admin.username`,
      );
    }
    if (res.status === 502 || res.status === 503 || res.status === 504) throw this.unreachable(what, why);
    throw new MeshError(ErrorCodes.ProviderRejected, `${this.at()} refused to ${what}: ${why}`, {
      retryable: res.status >= 500,
      cause: new ApiRefusal(res.status, reason),
    });
  }

  private at(): string {
    return `RabbitMQ provider ${this.provider.name} (management API ${this.api.slice(0, -"/api".length)}, AMQP ${this.provider.endpoint})`;
  }

  /** The management API refuses connections while the broker answers AMQP: the plugin is off. */
  private managementOff(what: string, cause: unknown): MeshError {
    const management = this.api.slice(0, -"/api".length);
    return new MeshError(
      ErrorCodes.ProviderUnreachable,
      `RabbitMQ at ${this.endpoint.host}:${this.endpoint.port} answers AMQP, but nothing listens on its management API at ${management}, so could not ${what}. ` +
        `Its management plugin is off: on the broker's host run \`${ENABLE_MANAGEMENT_COMMAND}\` (it starts at once, no restart); the provisioner retries by itself. ` +
        `If the plugin runs on another port, set options.managementUrl to it.`,
      { retryable: true, cause },
    );
  }

  private unreachable(what: string, why: string, cause?: unknown): MeshError {
    return new MeshError(
      ErrorCodes.ProviderUnreachable,
      `${this.at()} is unreachable (${why}), so could not ${what}; check that the server runs with the rabbitmq_management plugin enabled and that options.managementUrl is where it listens`,
      { retryable: true, cause },
    );
  }
}

/** Validated names of a request's grant, and the words for its messages. */
function grantNames(grant: { module: string; requirement: string; generation: number }, verb: string) {
  checkGrantRef(grant);
  const { module, requirement, generation } = grant;
  const names = rabbitmqNames(module, requirement);
  return { names, user: rabbitmqUserName(names.vhost, generation), mark: markOf(module, requirement), what: `${verb} ${module}/${requirement}` };
}

// Every name is validated before it gets here and encoded all the same.
const vhostPath = (vhost: string) => `/vhosts/${encodeURIComponent(vhost)}`;
const userPath = (user: string) => `/users/${encodeURIComponent(user)}`;
const permissionPath = (vhost: string, user: string) => `/permissions/${encodeURIComponent(vhost)}/${encodeURIComponent(user)}`;

/** Whether something accepts TCP connections at `host:port` within {@link AMQP_PROBE_TIMEOUT_MS}. */
function acceptsConnections(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = tcpConnect({ host, port });
    const done = (ok: boolean) => (s.destroy(), resolve(ok));
    s.setTimeout(AMQP_PROBE_TIMEOUT_MS, () => done(false));
    s.once("connect", () => done(true));
    s.once("error", () => done(false));
  });
}

function endpointOf(provider: ProviderConfig): Endpoint {
  const e = parseEndpoint(provider, {
    schemes: ["amqp", "amqps"],
    example: "amqp://127.0.0.1:5672 (the AMQP address holders connect to)",
    defaultPort: (scheme) => (scheme === "amqps" ? 5671 : DEFAULT_PORT),
    refusePath: "names a vhost; each grant gets a vhost of its own",
  });
  if (provider.tls && e.scheme !== "amqps") {
    throw new MeshError(
      ErrorCodes.ProviderMisconfigured,
      `provider ${provider.name}: tls is given, but the endpoint is amqp://; name the server amqps://host:port`,
    );
  }
  return { protocol: e.scheme === "amqps" ? "amqps" : "amqp", host: e.host, port: e.port, ...(provider.tls ? { tls: provider.tls } : {}) };
}

/** The provider's `options.managementUrl`, validated, without a trailing slash. */
function parseManagementUrl(provider: ProviderConfig): string {
  const options = provider.options ?? {};
  const unknown = Object.keys(options).filter((k) => !KNOWN_OPTIONS.includes(k));
  const bad = (why: string) =>
    new MeshError(
      ErrorCodes.ProviderMisconfigured,
      `provider ${provider.name}: ${why}; set options.managementUrl to the URL of the RabbitMQ management plugin, such as http://127.0.0.1:15672`,
    );
  if (unknown.length > 0)
    throw bad(`unknown option ${unknown.map((k) => JSON.stringify(k)).join(", ")} (rabbitmq.vhost knows only ${KNOWN_OPTIONS.join(", ")})`);
  const raw = options.managementUrl;
  if (!raw) throw bad("options.managementUrl is not set");
  if (typeof raw !== "string") throw bad("options.managementUrl is a list; give one URL");
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw bad(`options.managementUrl ${JSON.stringify(raw)} is not a URL`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") throw bad(`options.managementUrl ${JSON.stringify(raw)} is not an http:// or https:// URL`);
  if (provider.tls && url.protocol !== "https:") {
    throw bad(
      `tls is given, but options.managementUrl ${JSON.stringify(raw)} is http://, which would send the admin's password in the clear; give the management plugin's https:// URL`,
    );
  }
  if (url.username || url.password)
    throw bad("options.managementUrl holds a user; the admin goes in admin.username and admin.passwordEnv or admin.passwordFile");
  if (url.search || url.hash) throw bad(`options.managementUrl ${JSON.stringify(raw)} has a query or fragment`);
  return `${url.origin}${url.pathname.replace(/\/+$/, "")}`;
}
