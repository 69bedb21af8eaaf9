/**
 * The adapter of kind `nats.user`: a user of a NATS server that may publish and subscribe only
 * where its requirement allows (`options.publish` / `options.subscribe`, by default the
 * module's own `app.<module>.>`, plus `_INBOX.>` and responses so request/reply works).
 *
 * nats-server 2.9 keeps one password per user and has no auth callout, so users live in its
 * config: user `<module>_<requirement>_a` serves odd generations and `_b` even ones, with the
 * same permissions; a rotation stages one beside the other. Each user is a record in
 * `<usersFile>.d/`, and the users file the server's config includes is rendered from all of
 * them (nats-users-file.ts: atomic, lock-free, no user lost to concurrent provisioners), always
 * with the provider's admin, so the mesh cannot lock itself out. The server is then told to
 * reload (SIGHUP to the pid in `options.pidFile`), and a change is reported done only once the
 * server has loaded it: the probe user of the new revision logs in. Retire removes the
 * generation's user; on reload nats-server 2.9.10 closes that user's open connections.
 *
 * The provisioner must run on the server's host, as a user that may write the users file and
 * signal the server. Passwords are on disk only as bcrypt hashes, and never in a message.
 */
import { readFile } from "node:fs/promises";
import { isAbsolute } from "node:path";
import bcrypt from "bcryptjs";
import { AuthorizationError, connect, type NatsConnection } from "@nats-io/transport-node";
import { ErrorCodes, Kinds, MeshError, errorMessage, grantId, isMeshError } from "@mesh/shared";
import type {
  AdapterFactory,
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
} from "./adapter.js";
import { checkGrantRef } from "./grant-ref.js";
import { generatePassword, passwordOf } from "./password.js";
import { NATS_ENDPOINT, parseEndpoint } from "./endpoint.js";
import {
  RECORD_MARKER,
  checkAdminName,
  natsPermissions,
  natsUserName,
  natsUserNames,
  probeUserName,
  userEntry,
  type NatsPermissions,
} from "./nats-user-config.js";
import { NatsUsersFile } from "./nats-users-file.js";

/**
 * bcrypt cost of the grants' passwords. They carry 192 random bits, so no cost makes guessing
 * feasible; the cost only buys server CPU: nats-server checks it on every connect (~5 ms at 6,
 * ~50 ms at 10) and again for every connected client of the file on every reload.
 */
export const USER_BCRYPT_COST = 6;
/** How long a login (connect and flush) may take. */
export const LOGIN_TIMEOUT_MS = 3_000;
/** How long the server may take to load a changed users file after being signalled. */
export const RELOAD_TIMEOUT_MS = 10_000;
/** Signal again when the server has not loaded the file after this long (a concurrent writer's file in between). */
const RESIGNAL_MS = 1_000;
const POLL_MS = 25;

/** Makes the `nats.user` adapter of `provider`; throws `ProviderMisconfigured` for a bad endpoint, admin or options. */
export const createNatsUserAdapter: AdapterFactory = (provider) => new NatsUserAdapter(provider);

type LoginOutcome = { ok: true } | { ok: false; reason: "rejected" | "unreachable"; error: unknown };

class NatsUserAdapter implements ProviderAdapter {
  readonly kinds = [Kinds.NatsUser] as const;
  private readonly host: string;
  private readonly port: number;
  /**
   * What the admin verbs need: the admin, the users file and the pid file, or why the provider
   * document does not give them. An agent makes login-only adapters from the document without
   * the admin's password, so the check waits until an admin verb is called.
   */
  private readonly managed: { admin: { username: string; password: string }; file: NatsUsersFile; pidFile: string } | MeshError;
  /** The admin's connection, kept between calls: a check costs a flush, not a bcrypt on the server. */
  private adminConn: Promise<NatsConnection> | undefined;

  constructor(private readonly provider: ProviderConfig) {
    ({ host: this.host, port: this.port } = parseEndpoint(provider, NATS_ENDPOINT));
    try {
      this.managed = managedFiles(provider);
    } catch (e) {
      if (!isMeshError(e)) throw e;
      this.managed = e;
    }
  }

  /** The admin and its files; throws the provider document's problem with them. */
  private m() {
    if (this.managed instanceof MeshError) throw this.managed;
    return this.managed;
  }

  private get admin() {
    return this.m().admin;
  }

  private get file() {
    return this.m().file;
  }

  private get pidFile() {
    return this.m().pidFile;
  }

  generate() {
    return generatePassword();
  }

  async observe(req: ObserveRequest): Promise<ObserveResult> {
    checkGrantRef(req.grant);
    const { module, requirement, generation } = req.grant;
    const user = natsUserName(module, requirement, generation);
    const grant = grantId(module, requirement);
    await this.checkAdmin(`observe ${grant}`);
    const details: Record<string, string> = {};
    if (user === this.admin.username) details.conflict = `user ${user} is the provider's admin`;
    const record = await this.file.readRecord(user);
    if (record && record.grant !== grant) details.conflict = `the record of user ${user} is ${record.grant ? `for ${record.grant}` : "the admin's"}`;
    if (!record || record.grant !== grant) return { exists: false, details };
    Object.assign(details, describePermissions(user, record.permissions!));
    // The record alone is not enough: the users file must hold it too (the server's side is checked on change).
    const rendered = (await this.file.readUsersFile())?.includes(userEntry(record)) ?? false;
    if (!rendered) details.usersFile = `${this.file.usersFile} lacks ${user}`;
    return { exists: rendered, details };
  }

  async create(req: CreateRequest): Promise<CreateResult> {
    checkGrantRef(req.grant);
    const { module, requirement, generation } = req.grant;
    const grant = grantId(module, requirement);
    const password = passwordOf(req);
    const permissions = natsPermissions(module, req.options);
    const user = natsUserName(module, requirement, generation);
    if (user === this.admin.username) {
      throw new MeshError(ErrorCodes.Conflict, `NATS user ${user} of ${grant} is the admin of provider ${this.provider.name}; give the provider another admin.username, or rename the requirement`);
    }
    await this.changeUsers(`create ${grant}`, async () => {
      const cur = await this.file.readRecord(user);
      if (cur && cur.grant !== grant) {
        throw new MeshError(ErrorCodes.Conflict, `NATS user ${user} has a record in ${this.file.recordsDir} that is not the mesh's for ${grant}; remove that record, or rename the requirement`);
      }
      const unchanged =
        cur?.generation === generation &&
        JSON.stringify(cur.permissions) === JSON.stringify(permissions) &&
        (await bcrypt.compare(password, cur.passwordHash));
      if (!unchanged) {
        const passwordHash = await bcrypt.hash(password, USER_BCRYPT_COST);
        await this.file.writeRecord({ mesh: RECORD_MARKER, user, passwordHash, grant, generation, permissions });
      }
    });
    const enc = encodeURIComponent;
    const hostInUri = this.host.includes(":") ? `[${this.host}]` : this.host;
    return {
      resource: describePermissions(user, permissions),
      bindings: {
        type: "nats",
        provider: this.provider.name,
        host: this.host,
        port: String(this.port),
        username: user,
        password,
        uri: `nats://${enc(user)}:${enc(password)}@${hostInUri}:${this.port}`,
      },
    };
  }

  async delete(req: DeleteRequest): Promise<void> {
    checkGrantRef(req.grant);
    const { module, requirement } = req.grant;
    const grant = grantId(module, requirement);
    await this.removeUsers(`delete ${grant}`, grant, natsUserNames(module, requirement));
  }

  /**
   * Removes the user of `req.grant.generation` from the users file; the server then closes its
   * connections. A user that serves a later generation by now (a late retire) is left alone.
   */
  async retire(req: RetireRequest): Promise<void> {
    checkGrantRef(req.grant);
    const { module, requirement, generation } = req.grant;
    const grant = grantId(module, requirement);
    await this.removeUsers(`retire generation ${generation} of ${grant}`, grant, [natsUserName(module, requirement, generation)], generation);
  }

  async login(req: LoginRequest): Promise<LoginResult> {
    const b = req.bindings;
    const lacking = ["host", "port", "username", "password"].filter((k) => !b[k]);
    if (lacking.length > 0) return { ok: false, reason: "rejected", message: `the binding lacks ${lacking.join(", ")}` };
    const where = `${b.host}:${b.port}`;
    const r = await tryLogin(b.host!, Number(b.port), b.username!, b.password!);
    if (r.ok) return { ok: true };
    const why = errorMessage(r.error);
    return r.reason === "rejected"
      ? { ok: false, reason: "rejected", message: `NATS at ${where} rejected user ${b.username}: ${why}` }
      : { ok: false, reason: "unreachable", message: `cannot log in to NATS at ${where}: ${why}` };
  }

  async close(): Promise<void> {
    const pending = this.adminConn;
    this.adminConn = undefined;
    await pending?.then((nc) => nc.close()).catch(() => {});
  }

  /**
   * Removes the records of `users` that are `grant`'s and, given `upTo`, of a generation no
   * later than it (a record of anything else is left alone).
   */
  private async removeUsers(what: string, grant: string, users: readonly string[], upTo = Infinity): Promise<void> {
    await this.changeUsers(what, async () => {
      for (const user of users) {
        const r = await this.file.readRecord(user);
        if (r?.grant === grant && r.generation! <= upTo) await this.file.removeRecord(user);
      }
    });
  }

  /**
   * Checks the server and its admin before anything is written, applies `mutate` to the
   * records, renders the users file and waits until the server has loaded it.
   */
  private async changeUsers(what: string, mutate: () => Promise<void>): Promise<void> {
    await this.checkAdmin(what);
    await this.file.ensureAdmin();
    await mutate();
    await this.untilLoaded(what);
  }

  /**
   * Renders the users file and signals the server until it has loaded the current revision:
   * the revision's probe user logs in. Another provisioner may render a newer revision
   * meanwhile; each round renders again and probes whatever revision the records are at.
   */
  private async untilLoaded(what: string): Promise<void> {
    const deadline = Date.now() + RELOAD_TIMEOUT_MS;
    let signalledAt = 0;
    for (;;) {
      const { revision, written } = await this.file.render();
      if (written) signalledAt = await this.signalReload(what);
      const probe = await tryLogin(this.host, this.port, probeUserName(revision), this.admin.password);
      if (probe.ok) return;
      if (probe.reason === "unreachable") throw this.unreachable(what, probe.error);
      if (Date.now() > deadline) {
        throw new MeshError(
          ErrorCodes.ProviderUnreachable,
          `${this.at()} did not load the users file ${this.file.usersFile} (revision ${revision}) within ${RELOAD_TIMEOUT_MS / 1000} s, so could not ${what}: unreachable for a reload; check that options.pidFile (${this.pidFile}) is that server's pid_file, that its config includes options.usersFile, and its log for a reload error`,
          { retryable: true },
        );
      }
      if (Date.now() - signalledAt >= RESIGNAL_MS) signalledAt = await this.signalReload(what);
      await new Promise((r) => setTimeout(r, POLL_MS));
    }
  }

  /** Tells the server to reload its config (SIGHUP to the pid in `options.pidFile`); returns when. */
  private async signalReload(what: string): Promise<number> {
    const misconfigured = (why: string, cause?: unknown) =>
      new MeshError(ErrorCodes.ProviderMisconfigured, `${this.at()}: ${why}, so could not ${what}`, cause === undefined ? {} : { cause });
    const gone = (why: string) =>
      new MeshError(ErrorCodes.ProviderUnreachable, `${this.at()} is unreachable for a reload (${why}), so could not ${what}; check that nats-server runs with pid_file ${this.pidFile}`, {
        retryable: true,
      });
    let text: string;
    try {
      text = await readFile(this.pidFile, "utf8");
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === "ENOENT") throw gone(`there is no pid file ${this.pidFile}`);
      throw misconfigured(`cannot read options.pidFile ${this.pidFile} (${code ?? errorMessage(e)}); make it readable by the provisioner`, e);
    }
    const pid = Number(text.trim());
    if (!Number.isSafeInteger(pid) || pid <= 1) throw misconfigured(`options.pidFile ${this.pidFile} holds no process id`);
    // A stale pid file may name another process by now; SIGHUP would end most of them.
    const comm = await readFile(`/proc/${pid}/comm`, "utf8").then(
      (s) => s.trim(),
      () => undefined,
    );
    if (comm === undefined) throw gone(`no process ${pid}, as named by ${this.pidFile}, runs on this host`);
    if (!comm.startsWith("nats-server")) throw misconfigured(`process ${pid} named by options.pidFile ${this.pidFile} is ${JSON.stringify(comm)}, not nats-server; refusing to signal it`);
    try {
      process.kill(pid, "SIGHUP");
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === "ESRCH") throw gone(`process ${pid} has ended`);
      throw misconfigured(`not allowed to signal nats-server (pid ${pid}: ${code ?? errorMessage(e)}); run the provisioner as the user that runs nats-server, on its host`, e);
    }
    return Date.now();
  }

  /**
   * Makes sure the server answers and accepts the admin. The admin's connection is kept for the
   * next call and shared by concurrent ones (one connect in flight, never one per call).
   */
  private async checkAdmin(what: string): Promise<void> {
    for (let attempt = 0; attempt < 2; attempt++) {
      const pending = (this.adminConn ??= connectAs(this.host, this.port, this.admin.username, this.admin.password));
      let nc: NatsConnection;
      try {
        nc = await pending;
      } catch (e) {
        if (this.adminConn === pending) this.adminConn = undefined;
        if (isRejection(e)) {
          throw new MeshError(
            ErrorCodes.ProviderMisconfigured,
            `${this.at()} rejected the admin user ${JSON.stringify(this.admin.username)} (${errorMessage(e)}), so could not ${what}; check admin.username and the password given by the provider's admin.passwordEnv or admin.passwordFile against the users file the server runs with`,
            { cause: e },
          );
        }
        throw this.unreachable(what, e);
      }
      if (await answers(nc)) return;
      // Closed (a server restart ends it: it does not reconnect) or silent: connect afresh once.
      if (this.adminConn === pending) this.adminConn = undefined;
      await nc.close().catch(() => {});
    }
    throw this.unreachable(what, new Error(`no answer to a flush within ${LOGIN_TIMEOUT_MS} ms`));
  }

  private unreachable(what: string, cause: unknown): MeshError {
    return new MeshError(
      ErrorCodes.ProviderUnreachable,
      `${this.at()} is unreachable (${errorMessage(cause)}), so could not ${what}; check that nats-server runs and listens on that address`,
      { retryable: true, cause },
    );
  }

  private at(): string {
    return `NATS provider ${this.provider.name} at ${this.provider.endpoint}`;
  }
}

/** Non-secret names of a user and what it may do, for `resource` and `observe`'s details. */
function describePermissions(user: string, p: NatsPermissions): Record<string, string> {
  return { user, publish: p.publish.join(","), subscribe: p.subscribe.join(",") };
}

/**
 * Connects as `user` without reconnecting, and flushes, so a refused login has surfaced. A
 * refused client is sometimes told only by the socket: the server closes it after its -ERR
 * while the client still writes (EPIPE, ECONNRESET; seen about once in a hundred rejected
 * logins), so such a failure is tried again before it counts.
 */
async function connectAs(host: string, port: number, user: string, pass: string): Promise<NatsConnection> {
  const server = `${host.includes(":") ? `[${host}]` : host}:${port}`;
  for (let attempt = 1; ; attempt++) {
    let nc: NatsConnection | undefined;
    try {
      nc = await connect({ servers: server, user, pass, reconnect: false, timeout: LOGIN_TIMEOUT_MS, name: "mesh nats.user adapter" });
      await nc.flush();
      return nc;
    } catch (e) {
      await nc?.close().catch(() => {});
      if (attempt >= HANDSHAKE_ATTEMPTS || !isClosedByPeer(e)) throw e;
    }
  }
}

/** How often {@link connectAs} tries when the server closed the socket mid-handshake. */
const HANDSHAKE_ATTEMPTS = 3;

const isClosedByPeer = (e: unknown) => {
  const err = e as { code?: string; cause?: { code?: string } };
  return ["EPIPE", "ECONNRESET"].includes(err?.code ?? err?.cause?.code ?? "");
};

/** Logs in as `user` and says how it went; closes the connection. */
async function tryLogin(host: string, port: number, user: string, pass: string): Promise<LoginOutcome> {
  try {
    await (await connectAs(host, port, user, pass)).close();
    return { ok: true };
  } catch (e) {
    return { ok: false, reason: isRejection(e) ? "rejected" : "unreachable", error: e };
  }
}

/** True when a connect failed because the server refused the credential ("Authorization Violation"). */
const isRejection = (e: unknown) => e instanceof AuthorizationError || /authorization violation/i.test(errorMessage(e));

/** True when `nc` is open and the server answers a flush in time. */
async function answers(nc: NatsConnection): Promise<boolean> {
  if (nc.isClosed()) return false;
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), LOGIN_TIMEOUT_MS)));
  try {
    return await Promise.race([nc.flush().then(() => true, () => false), late]);
  } finally {
    clearTimeout(timer);
  }
}


/** The admin and the files of a provider document; throws `ProviderMisconfigured` naming what is missing. */
function managedFiles(provider: ProviderConfig): { admin: { username: string; password: string }; file: NatsUsersFile; pidFile: string } {
  const at = `provider ${provider.name}`;
  const username = checkAdminName(provider.admin?.username, at);
  const password = provider.admin?.password;
  if (!password) {
    throw new MeshError(
      ErrorCodes.ProviderMisconfigured,
      `${at}: the NATS admin ${JSON.stringify(username)} has no password; give admin.passwordEnv or admin.passwordFile (the users file holds the admin, so it needs one)`,
    );
  }
  const admin = { username, password };
  const option = (key: "usersFile" | "pidFile", what: string) => {
    const v = provider.options?.[key];
    if (!v || !isAbsolute(v)) {
      throw new MeshError(
        ErrorCodes.ProviderMisconfigured,
        `${at}: options.${key} ${v ? `${JSON.stringify(v)} is not an absolute path` : "is missing"}; give the absolute path of ${what} on the server's host`,
      );
    }
    return v;
  };
  return {
    admin,
    file: new NatsUsersFile(option("usersFile", "the users file that the server's config includes"), admin),
    pidFile: option("pidFile", "the server's pid_file"),
  };
}
