/**
 * The mesh's token issuer for the distribution registry (Docker's token authentication): the
 * registry sends a client without a token to `GET /token?service=…&scope=…` here; the client
 * authenticates as a grant's user (HTTP Basic) and gets a token for the repositories of its
 * namespace it asked for, and nothing else (grantedAccess). The provisioner's `oci.registry`
 * adapter manages the users through `/admin/users/…`, as the issuer's admin.
 *
 * Who may do what:
 * - `/token`: anyone who knows a current password of a user, for that user's namespace only;
 *   a retired generation's password gets nothing from the moment it is retired, and each token
 *   lives at most {@link MAX_TOKEN_LIFETIME_S} s. Failed logins are limited per client address
 *   and per user (login-limiter.ts): past the limit, 429 with `Retry-After`, no password checked.
 * - `/admin/…`: the admin alone (HTTP Basic, compared in constant time); it receives salted
 *   scrypt hashes, never a password.
 * Nothing secret is logged: no password, hash, Authorization header or token, only user names,
 * granted repositories and outcomes.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { createServer as createHttpsServer, type Server as HttpsServer } from "node:https";
import { readFileSync, realpathSync } from "node:fs";
import { dirname, join } from "node:path";
import { createHash, timingSafeEqual } from "node:crypto";
import type { AddressInfo } from "node:net";
import { grantedAccess, isPasswordHash, verifyPassword } from "@mesh/providers";
import { errorMessage, isLoopback, isValidName } from "@mesh/shared";
import type { Logger } from "@mesh/shared/service";
import { MAX_TOKEN_LIFETIME_S, signToken } from "./token.js";
import { ensureSigningKey, type SigningKey } from "./signing-key.js";
import { UserStore } from "./user-store.js";
import { ensureAdminPassword } from "./admin-password.js";
import { LoginLimiter, type LoginAttempt, type LoginLimits, type LoginLock } from "./login-limiter.js";

export interface TokenIssuerOptions {
  /** Holds the signing key, its certificate and the users; made when missing. */
  stateDir: string;
  /** The admin's password, or the file that holds it (made with a random one, mode 0600, when missing). */
  admin: { username: string; password: string } | { username: string; passwordFile: string };
  /** The registry's `auth.token.service`: the only audience tokens are made for. */
  service: string;
  /** The registry's `auth.token.issuer`. */
  issuer: string;
  /** How long a token works, in seconds (1 … 60); default 60. */
  lifetimeSeconds?: number;
  host?: string;
  /** 0: a free port. */
  port?: number;
  /**
   * A directory holding `tls.crt` and `tls.key`: a `tls.certificate` binding of the mesh (its
   * symlink swapped at each renewal) or the operator's own. The issuer then serves HTTPS and reads
   * the files again within {@link TLS_RELOAD_MS} of a change; open connections keep theirs.
   * Required to listen beyond loopback: passwords and tokens cross that wire.
   */
  tlsDir?: string;
  /** Failed logins allowed per client address and per user, and their window (default 10 and 5 a minute: `DEFAULT_LOGIN_LIMITS`). */
  loginLimits?: Partial<LoginLimits>;
  /** A monotonic clock in ms, for the login limits (default `performance.now()`); tests pass their own. */
  now?: () => number;
  log: Logger;
}

/** How often the issuer looks for a renewed certificate in its `tlsDir`. */
export const TLS_RELOAD_MS = 2_000;

/** The certificate and key in `dir`, read from the one directory its entries resolve to (so both are one generation's). */
function readTls(dir: string): { cert: string; key: string; at: string } {
  const at = realpathSync(join(dir, "tls.crt"));
  const real = dirname(at);
  return { cert: readFileSync(join(real, "tls.crt"), "utf8"), key: readFileSync(join(real, "tls.key"), "utf8"), at };
}

export interface TokenIssuer {
  /** `http://host:port` (`https://` with `tlsDir`); the registry's realm is `${url}/token`. */
  url: string;
  /** The certificate the registry must trust (`auth.token.rootcertbundle`). */
  certificatePath: string;
  close(): Promise<void>;
}

/** Largest request body accepted (an admin PUT is a few hundred bytes). */
const MAX_BODY_BYTES = 4_096;
const USER_NAME = /^([a-z][a-z0-9-]*)\.([a-z][a-z0-9-]*)$/;

class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }
}

/** Starts the issuer; resolves once it listens. Throws what {@link ensureSigningKey} throws, and for a lifetime out of range. */
export async function startTokenIssuer(opts: TokenIssuerOptions): Promise<TokenIssuer> {
  const lifetimeSeconds = opts.lifetimeSeconds ?? MAX_TOKEN_LIFETIME_S;
  if (!(Number.isInteger(lifetimeSeconds) && lifetimeSeconds >= 1 && lifetimeSeconds <= MAX_TOKEN_LIFETIME_S)) {
    throw new Error(`the token lifetime must be a whole number of seconds from 1 to ${MAX_TOKEN_LIFETIME_S}, not ${lifetimeSeconds}`);
  }
  const host = opts.host ?? "127.0.0.1";
  if (!opts.tlsDir && !isLoopback(host)) {
    throw new Error(
      `${host} is not a loopback address, and beyond loopback the issuer serves only HTTPS (holders send it their passwords, and it hands out tokens): name a directory with tls.crt and tls.key in MESH_OCI_ISSUER_TLS_DIR (a tls.certificate binding of the mesh), or listen on 127.0.0.1`,
    );
  }
  let tls: ReturnType<typeof readTls> | undefined;
  try {
    tls = opts.tlsDir ? readTls(opts.tlsDir) : undefined;
  } catch (e) {
    throw new Error(`cannot read the certificate in ${opts.tlsDir} (tls.crt and tls.key): ${errorMessage(e)}`, { cause: e });
  }
  const limiter = new LoginLimiter(opts.loginLimits);
  const key = await ensureSigningKey(opts.stateDir);
  const users = new UserStore(opts.stateDir);
  const admin = { username: opts.admin.username, password: "password" in opts.admin ? opts.admin.password : ensureAdminPassword(opts.admin.passwordFile) };
  const handler = requestHandler({ ...opts, admin, lifetimeSeconds, key, users, limiter, now: opts.now ?? (() => performance.now()) });
  const listener = (req: IncomingMessage, res: ServerResponse) => {
    handler(req, res).catch((e: unknown) => {
      const status = e instanceof HttpError ? e.status : 500;
      if (status === 500) opts.log.error({ err: e, path: pathOf(req) }, "request failed");
      if (!res.headersSent) {
        res.writeHead(status, { "content-type": "application/json", ...(e instanceof HttpError ? e.headers : {}) });
        res.end(JSON.stringify({ errors: [{ code: codeOf(status), message: e instanceof HttpError ? e.message : "internal error; see the issuer's log" }] }));
      } else res.destroy();
    });
  };
  const server: Server = tls ? createHttpsServer({ cert: tls.cert, key: tls.key }, listener) : createServer(listener);
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(opts.port ?? 0, host, resolve);
  });
  // A renewed certificate (the binding's symlink moved to a new generation) is served to new connections.
  const reload =
    tls && opts.tlsDir
      ? setInterval(() => {
          try {
            const next = readTls(opts.tlsDir!);
            if (next.at === tls!.at && next.cert === tls!.cert) return;
            (server as unknown as HttpsServer).setSecureContext({ cert: next.cert, key: next.key });
            tls = next;
            opts.log.info({ certificate: next.at }, "serving a renewed certificate");
          } catch (e) {
            opts.log.warn({ err: e, dir: opts.tlsDir }, "cannot read the certificate again; serving the one before");
          }
        }, TLS_RELOAD_MS)
      : undefined;
  reload?.unref();
  const { address, port } = server.address() as AddressInfo;
  const url = `${tls ? "https" : "http"}://${address.includes(":") ? `[${address}]` : address}:${port}`;
  opts.log.info(
    { url, realm: `${url}/token`, service: opts.service, issuer: opts.issuer, certificate: key.certificatePath, lifetimeSeconds, loginLimits: limiter.limits },
    "token issuer listening",
  );
  return {
    url,
    certificatePath: key.certificatePath,
    close: () => {
      if (reload) clearInterval(reload);
      return new Promise<void>((resolve) => (server.closeAllConnections(), server.close(() => resolve())));
    },
  };
}

const pathOf = (req: IncomingMessage) => new URL(req.url ?? "/", "http://issuer").pathname;
const codeOf = (status: number) =>
  status === 401
    ? "UNAUTHORIZED"
    : status === 403
      ? "DENIED"
      : status === 404
        ? "NOT_FOUND"
        : status === 409
          ? "CONFLICT"
          : status === 429
            ? "TOOMANYREQUESTS"
            : status >= 500
              ? "UNKNOWN"
              : "INVALID_REQUEST";

/** `<module>.<requirement>`'s two names, or undefined for a name no user can have. */
function userNames(user: string): { module: string; requirement: string } | undefined {
  const m = USER_NAME.exec(user);
  return m && isValidName(m[1]!) && isValidName(m[2]!) ? { module: m[1]!, requirement: m[2]! } : undefined;
}

/** The client's address, an IPv4 one without its IPv6-mapped prefix. */
function clientAddress(req: IncomingMessage): string {
  return (req.socket.remoteAddress ?? "unknown").replace(/^::ffff:(?=\d+\.\d+\.\d+\.\d+$)/, "");
}

/** The 429 of a locked login: what happened, and when to try again (also as `Retry-After`, whole seconds). */
function lockedOut(lock: LoginLock, attempt: LoginAttempt, windowMs: number): HttpError {
  const seconds = Math.max(1, Math.ceil(lock.retryAfterMs / 1000));
  const who = lock.by === "address" ? `from ${attempt.address}` : `as user ${attempt.user}`;
  return new HttpError(
    429,
    `too many failed logins ${who} (${lock.failures} within ${Math.round(windowMs / 1000)} s): no password is checked ${lock.by === "address" ? "from there" : "for that user"} until the window ends; try again in ${seconds} s, with a current password of the grant`,
    { "retry-after": String(seconds) },
  );
}

function requestHandler(
  ctx: Omit<TokenIssuerOptions, "admin" | "now"> & {
    admin: { username: string; password: string };
    lifetimeSeconds: number;
    key: SigningKey;
    users: UserStore;
    limiter: LoginLimiter;
    now: () => number;
  },
) {
  const adminDigest = digestOf(`${ctx.admin.username}:${ctx.admin.password}`);
  const log = ctx.log;

  return async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const url = new URL(req.url ?? "/", "http://issuer");
    const path = url.pathname;
    if (path === "/token" && req.method === "GET") return token(req, url, res);
    if (path === "/healthz" && req.method === "GET") return send(res, 200, { ok: true });
    const m = /^\/admin\/users\/([^/]+)(?:\/generations\/(\d+))?$/.exec(path);
    if (!m) throw new HttpError(404, `no such path: ${req.method} ${path}`);
    const basic = basicAuth(req);
    // Hashing both sides makes the comparison constant-time whatever their lengths.
    if (!basic || !timingSafeEqual(digestOf(`${basic.user}:${basic.password}`), adminDigest)) {
      log.warn({ path }, "admin request refused: wrong or no admin credential");
      throw new HttpError(401, "the admin credential is wrong or missing", { "www-authenticate": 'Basic realm="mesh oci token issuer admin"' });
    }
    const user = decodeURIComponent(m[1]!);
    const names = userNames(user);
    if (!names) throw new HttpError(400, `user name ${JSON.stringify(user)} is not <module>.<requirement>`);
    const mark = `${names.module}/${names.requirement}`;
    const generation = m[2] === undefined ? undefined : Number(m[2]);
    if (generation !== undefined && !(Number.isSafeInteger(generation) && generation >= 1)) throw new HttpError(400, `generation ${m[2]} is not 1, 2, 3 …`);

    if (req.method === "GET" && generation === undefined) {
      const record = ctx.users.get(user);
      if (!record) throw new HttpError(404, `no user ${user}`);
      const generations = Object.fromEntries(Object.entries(record.passwords).map(([slot, p]) => [slot, p!.generation]));
      return send(res, 200, { user, mark: record.mark, namespace: record.namespace, generations });
    }
    if (req.method === "PUT" && generation !== undefined) {
      const body = (await readJson(req)) as { hash?: unknown };
      if (!isPasswordHash(body.hash)) throw new HttpError(400, 'the body must be {"hash": <a scrypt hash made by the oci.registry adapter>}');
      const result = ctx.users.setGeneration(user, mark, names.module, generation, body.hash);
      if (result === "conflict") throw new HttpError(409, `user ${user} belongs to grant ${ctx.users.get(user)?.mark}, not ${mark}`);
      log.info({ user, generation }, "generation set");
      return send(res, 200, { user, generation });
    }
    if (req.method === "DELETE") {
      const result = generation === undefined ? ctx.users.delete(user, mark) : ctx.users.retireGeneration(user, mark, generation);
      if (result === "changed")
        log.info({ user, ...(generation === undefined ? {} : { generation }) }, generation === undefined ? "user deleted" : "generation retired");
      res.writeHead(204).end();
      return;
    }
    throw new HttpError(405, `${req.method} is not allowed on ${path}`);
  };

  async function token(req: IncomingMessage, url: URL, res: ServerResponse): Promise<void> {
    const service = url.searchParams.get("service");
    if (service !== ctx.service)
      throw new HttpError(400, `this issuer makes tokens for service ${JSON.stringify(ctx.service)} only, not ${JSON.stringify(service)}`);
    const basic = basicAuth(req);
    const refuse = (why: string, user?: string) => {
      log.info({ user, why }, "token refused");
      return new HttpError(401, "authentication required: a current username and password of an oci.registry grant", {
        "www-authenticate": 'Basic realm="mesh oci registry"',
      });
    };
    if (!basic) throw refuse("no credential");
    // Counted per user only under a name a user can have: any other fails without a check, and would only fill the table.
    const attempt: LoginAttempt = { address: clientAddress(req), ...(userNames(basic.user) ? { user: basic.user } : {}) };
    const lock = ctx.limiter.lockOf(attempt, ctx.now());
    if (lock) {
      // Like refuse(): a name is logged only when it is a user's (one typed into the wrong field may be a password).
      log.info(
        { user: ctx.users.get(basic.user) ? basic.user : undefined, address: attempt.address, lockedBy: lock.by, retryAfterMs: Math.round(lock.retryAfterMs) },
        "token refused: too many failed logins",
      );
      throw lockedOut(lock, attempt, ctx.limiter.limits.windowMs);
    }
    const record = ctx.users.get(basic.user);
    let generation: number | undefined;
    for (const p of Object.values(record?.passwords ?? {})) {
      if (p && (await verifyPassword(basic.password, p.hash))) generation = p.generation;
    }
    if (!record || generation === undefined) {
      ctx.limiter.recordFailure(attempt, ctx.now());
      throw refuse("unknown user or wrong or retired password", record ? basic.user : undefined);
    }
    const access = grantedAccess(url.searchParams.getAll("scope"), record.namespace);
    const t = signToken(ctx.key, {
      issuer: ctx.issuer,
      service: ctx.service,
      subject: basic.user,
      access,
      lifetimeSeconds: ctx.lifetimeSeconds,
      now: Math.floor(Date.now() / 1000),
    });
    log.debug({ user: basic.user, generation, granted: access.map((a) => `${a.name}:${a.actions.join(",")}`) }, "token issued");
    return send(res, 200, { token: t.token, access_token: t.token, expires_in: t.expiresIn, issued_at: t.issuedAt });
  }
}

function digestOf(s: string): Buffer {
  return createHash("sha256").update(s).digest();
}

function basicAuth(req: IncomingMessage): { user: string; password: string } | undefined {
  const h = req.headers.authorization;
  if (!h || !/^basic /i.test(h)) return undefined;
  const decoded = Buffer.from(h.slice(6).trim(), "base64").toString("utf8");
  const colon = decoded.indexOf(":");
  return colon < 0 ? undefined : { user: decoded.slice(0, colon), password: decoded.slice(colon + 1) };
}

async function readJson(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY_BYTES) throw new HttpError(413, `the body is larger than ${MAX_BODY_BYTES} bytes`);
    chunks.push(chunk as Buffer);
  }
  try {
    return JSON.parse(Buffer.concat(chunks).toString("utf8")) ?? {};
  } catch (e) {
    throw new HttpError(400, `the body is not JSON: ${errorMessage(e)}`);
  }
}

function send(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { "content-type": "application/json", "cache-control": "no-store" }).end(JSON.stringify(body));
}
