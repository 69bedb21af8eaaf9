/**
 * The adapter of kind `npm.registry`: a package scope `@<module>` on a Verdaccio registry
 * (6.8.0), with a credential that may install and publish packages of that scope and nothing
 * else, decided by the mesh's own auth plugin (deploy/verdaccio/plugins/verdaccio-mesh-scopes).
 *
 * Verdaccio's access rules live in its config, and every edit of that is a restart that cuts
 * holders off. So users are not in the config: the plugin reads a users directory on every
 * request (`options.usersDir` of the provider, `auth.mesh-scopes.usersDir` of Verdaccio), and this
 * adapter writes it, one file `<user>.json` per user, each written to a temporary file and
 * renamed into place (a reader sees the old file or the new one, never half of one; two
 * provisioners never rewrite a file of the other's users, as no file holds more than one user).
 * Who may read it: Verdaccio (to check logins) and the provisioner; who may write it: the
 * provisioner alone (the directory's owner; files are 0640). It holds hashes only: SHA-256 of a
 * 4-byte salt and the password, which is 24 random bytes, so a hash gives nothing to guess from.
 *
 * Layout per grant (docs/design.md, "Overlap per backend"): users `<base>_a` (odd generations) and
 * `<base>_b` (even ones), `<base>` the grant's base name (`shop/pkgs` → `shop_pkgs`), both
 * confined to scope `@shop`, shared by every `npm.registry` requirement of module `shop` (as
 * Redis's key prefix is). A rotation stages k+1 on the other user while k keeps working.
 * Retiring a generation clears its user's hash (the plugin refuses it at the next request, a
 * token it was issued before included); staging it again sets a new one. Each file carries the
 * grant's mark and the generation it serves: a file of the grant's user name without the mark is
 * a Conflict and never taken over, and a late retire of k leaves alone the user k+2 serves.
 *
 * Holders authenticate with HTTP Basic (the binding's `npmrc` sets `_auth` for the registry), so
 * Verdaccio asks the plugin on every request: nothing outlives a retire. Packages stay in the
 * registry's storage when a grant goes: the mesh removes users, never packages.
 *
 * With `tls:` the endpoint is `https://`, and the registry is verified against the provider's
 * bundle (provider-tls.ts) by the admin verbs' ping, the logins and the handovers' publishes; the
 * bindings carry the bundle as `ca.crt`. The `npmrc` does not name it: npm's `ca` and `cafile`
 * replace the system's authorities for every registry npm reaches, the public one included, so
 * a holder adds the bundle to them instead (`NODE_EXTRA_CA_CERTS=<binding>/ca.crt`).
 *
 * Every admin verb first checks `options.usersDir` (terminal `ProviderMisconfigured`), then asks
 * the registry's `/-/ping`, so a registry that is down is `ProviderUnreachable` (retryable)
 * rather than users written for a server that is not there.
 */
import { createHash, randomBytes } from "node:crypto";
import { readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { isAbsolute, join } from "node:path";
import { ErrorCodes, Kinds, MeshError, errorMessage } from "@mesh/shared";
import type {
  AdapterFactory,
  ArtifactRequest,
  ArtifactSink,
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
import { parseEndpoint, type Endpoint } from "./endpoint.js";
import { fetchFailureCause } from "./fetch-failure.js";
import { grantBaseName } from "./grant-base-name.js";
import { checkGrantRef } from "./grant-ref.js";
import { generatePassword, passwordOf } from "./password.js";
import { bindingCa, caBindings, checkHttpsTls, trustsResource, unverifiedLogin, unverifiedServer, verifyingFetch } from "./provider-tls.js";
import { npmRegistrySink } from "./registry-artifacts.js";
import { slotName } from "./alternating.js";

/** How long one request to the registry may take. */
export const REGISTRY_TIMEOUT_MS = 5_000;
/**
 * Longest base name: the plugin accepts user names of up to 123 characters (`<base>_a`); 100
 * holds every mapped mesh name, so none is ever shortened.
 */
export const MAX_BASE_LENGTH = 100;
/** The user names the adapter makes and the plugin accepts (the plugin's USER_NAME). */
export const NPM_USER_NAME = /^[a-z][a-z0-9_]{0,120}_[ab]$/;
/** The provider options this adapter reads. */
const KNOWN_OPTIONS = ["usersDir"];

/** Makes the `npm.registry` adapter of `provider`; throws `ProviderMisconfigured` for an endpoint it cannot use. */
export const createNpmRegistryAdapter: AdapterFactory = (provider) => new NpmRegistryAdapter(provider);

/** What the plugin reads of one user: the file `<usersDir>/<user>.json`. */
export interface NpmUserRecord {
  user: string;
  /** `@<module>`: the only packages the user may read, publish and unpublish. */
  scope: string;
  /** `mesh grant <module>/<requirement>`: whose user it is. */
  mark: string;
  /** The generation the user serves (or served, when retired). */
  generation: number;
  /** {@link npmPasswordHash} of the generation's password; null once retired. */
  hash: string | null;
}

/** The names of grant `module/requirement`: scope `@<module>`, users `<base>_a` and `<base>_b`. */
export function npmNames(module: string, requirement: string): { scope: string; users: readonly [string, string] } {
  const base = grantBaseName(module, requirement, MAX_BASE_LENGTH);
  return { scope: `@${module}`, users: [npmUserName(base, 1), npmUserName(base, 2)] };
}

/** The user of `generation` under `base`: `<base>_a` for odd generations, `<base>_b` for even ones. */
export function npmUserName(base: string, generation: number): string {
  const user = slotName(base, generation);
  if (!NPM_USER_NAME.test(user))
    throw new MeshError(ErrorCodes.InvalidName, `npm user name ${JSON.stringify(user)} is refused: it must match ${NPM_USER_NAME}`);
  return user;
}

/** `sha256$<salt hex>$<SHA-256(salt ‖ UTF-8 password) hex>`, what the plugin checks; a fresh 4-byte salt unless one is given. */
export function npmPasswordHash(password: string, salt: Buffer = randomBytes(4)): string {
  return `sha256$${salt.toString("hex")}$${createHash("sha256").update(salt).update(password, "utf8").digest("hex")}`;
}

/**
 * The `.npmrc` a holder points npm at (`NPM_CONFIG_USERCONFIG=<binding>/npmrc`): scope `scope`
 * goes to `registry`, with HTTP Basic `auth` (base64 `user:password`) for that registry only.
 */
export function npmrcOf(scope: string, registry: string, auth: string): string {
  const nerfDart = registry.replace(/^https?:/, "");
  return `${scope}:registry=${registry}\n${nerfDart}:_auth=${auth}\n`;
}

const markOf = (module: string, requirement: string) => `mesh grant ${module}/${requirement}`;

class NpmRegistryAdapter implements ProviderAdapter {
  readonly kinds = [Kinds.NpmRegistry] as const;
  private readonly endpoint: Endpoint;
  /** The registry's URL with a trailing slash, as npm wants it. */
  private readonly registry: string;
  /** Why the users directory cannot be used, thrown by every admin verb (an agent's login-only adapter needs none). */
  private readonly usersDirProblem: MeshError | undefined;
  private readonly usersDir: string = "";

  constructor(private readonly provider: ProviderConfig) {
    this.endpoint = parseEndpoint(provider, {
      schemes: ["http", "https"],
      example: "http://127.0.0.1:4873 (the registry's URL, as holders reach it)",
      defaultPort: (scheme) => (scheme === "https" ? 443 : 80),
    });
    const url = new URL(provider.endpoint);
    this.registry = `${url.origin}${url.pathname.replace(/\/*$/, "/")}`;
    checkHttpsTls(provider, "npm", { endpoint: provider.endpoint });
    try {
      this.usersDir = parseUsersDir(provider);
    } catch (e) {
      this.usersDirProblem = e as MeshError;
    }
  }

  generate() {
    return generatePassword();
  }

  async observe(req: ObserveRequest): Promise<ObserveResult> {
    const g = grantNames(req.grant, "observe");
    await this.reachable(g.what);
    const r = await this.readUser(g.what, g.user);
    const details: Record<string, string> = {};
    if (r && r.mark !== g.mark) {
      details.conflict = `user ${g.user} exists but is not the mesh's for ${req.grant.module}/${req.grant.requirement}`;
      return { exists: false, details };
    }
    if (!r) return { exists: false, details, missing: [`user ${g.user}`] };
    details.user = g.user;
    details.scope = r.scope;
    if (r.hash === null) details.userLogin = "disabled";
    return { exists: true, details };
  }

  async create(req: CreateRequest): Promise<CreateResult> {
    const g = grantNames(req.grant, "create");
    const password = passwordOf(req);
    await this.reachable(g.what);
    const existing = await this.readUser(g.what, g.user);
    if (existing && existing.mark !== g.mark) {
      throw new MeshError(
        ErrorCodes.Conflict,
        `npm user ${g.user} already exists in ${this.usersDir} and was not made by the mesh for this grant (its mark is ${JSON.stringify(existing.mark)}, expected ${JSON.stringify(g.mark)}); remove that file, or rename the requirement`,
      );
    }
    await this.writeUser(g.what, { user: g.user, scope: g.names.scope, mark: g.mark, generation: req.grant.generation, hash: npmPasswordHash(password) });
    const auth = Buffer.from(`${g.user}:${password}`).toString("base64");
    return {
      resource: { scope: g.names.scope, user: g.user, ...trustsResource(this.provider.tls) },
      bindings: {
        type: "npm",
        provider: this.provider.name,
        host: this.endpoint.host,
        port: String(this.endpoint.port),
        registry: this.registry,
        scope: g.names.scope,
        username: g.user,
        password,
        auth,
        npmrc: npmrcOf(g.names.scope, this.registry, auth),
        ...caBindings(this.provider.tls),
      },
    };
  }

  async delete(req: DeleteRequest): Promise<void> {
    const g = grantNames({ ...req.grant, generation: 1 }, "delete");
    await this.reachable(g.what);
    for (const user of g.names.users) {
      const r = await this.readUser(g.what, user);
      // Only the grant's own users go; a file of that name without its mark is left alone.
      if (r && r.mark === g.mark) await this.fs(g.what, () => rm(this.fileOf(user), { force: true }));
    }
  }

  /** Clears the hash of the generation's user, unless it serves a later generation now (a stale retire). */
  async retire(req: RetireRequest): Promise<void> {
    const g = grantNames(req.grant, `retire generation ${req.grant.generation} of`);
    await this.reachable(g.what);
    const r = await this.readUser(g.what, g.user);
    if (!r || r.mark !== g.mark || r.generation > req.grant.generation || r.hash === null) return;
    await this.writeUser(g.what, { ...r, hash: null });
  }

  /** `npm whoami`'s request: GET `<registry>-/whoami` with the binding's Basic auth; the registry must name the binding's user. */
  async login(req: LoginRequest): Promise<LoginResult> {
    const b = req.bindings;
    const lacking = ["registry", "username", "password"].filter((k) => !b[k]);
    if (lacking.length > 0) return { ok: false, reason: "rejected", message: `the binding lacks ${lacking.join(", ")}` };
    const tls = bindingCa(b);
    let res: Response;
    try {
      res = await verifyingFetch(
        new URL("-/whoami", b.registry),
        {
          headers: { authorization: `Basic ${Buffer.from(`${b.username}:${b.password}`).toString("base64")}`, accept: "application/json" },
          signal: AbortSignal.timeout(REGISTRY_TIMEOUT_MS),
        },
        tls,
      );
    } catch (e) {
      return (
        unverifiedLogin(`the npm registry at ${b.registry}`, e, Boolean(tls)) ?? {
          ok: false,
          reason: "unreachable",
          message: `cannot reach the npm registry at ${b.registry}: ${fetchFailureCause(e, REGISTRY_TIMEOUT_MS)}`,
        }
      );
    }
    const body = (await res.json().catch(() => undefined)) as { username?: unknown } | undefined;
    if (res.ok && body?.username === b.username) return { ok: true };
    if (res.status >= 500) return { ok: false, reason: "unreachable", message: `the npm registry at ${b.registry} answered HTTP ${res.status}` };
    return {
      ok: false,
      reason: "rejected",
      message: `the npm registry at ${b.registry} did not log ${b.username} in (HTTP ${res.status}, whoami ${JSON.stringify(body?.username ?? null)})`,
    };
  }

  /** Where a handover publishes the grant's packages: the scope, through the generation's own credential, as a holder publishes. */
  async artifactSink(req: ArtifactRequest): Promise<ArtifactSink> {
    checkGrantRef(req.grant);
    return npmRegistrySink(req.bindings);
  }

  async close(): Promise<void> {
    // Nothing held: every call is a request or a file of its own.
  }

  private fileOf(user: string): string {
    return join(this.usersDir, `${user}.json`);
  }

  /** The user's record; undefined when it has no file. */
  private async readUser(what: string, user: string): Promise<NpmUserRecord | undefined> {
    const text = await this.fs(what, () => readFile(this.fileOf(user), "utf8")).catch((e: unknown) => {
      if ((e as MeshError).cause && ((e as MeshError).cause as NodeJS.ErrnoException).code === "ENOENT") return undefined;
      throw e;
    });
    if (text === undefined) return undefined;
    try {
      return JSON.parse(text) as NpmUserRecord;
    } catch (e) {
      throw new MeshError(ErrorCodes.Conflict, `${this.fileOf(user)} is not a user file of the mesh (not JSON), so could not ${what}; remove it`, { cause: e });
    }
  }

  /** Writes the record to a temporary file in the users directory and renames it into place. */
  private async writeUser(what: string, r: NpmUserRecord): Promise<void> {
    const tmp = join(this.usersDir, `.${r.user}.${randomBytes(6).toString("hex")}.tmp`);
    await this.fs(what, async () => {
      try {
        await writeFile(tmp, `${JSON.stringify(r)}\n`, { mode: 0o640, flag: "wx" });
        await rename(tmp, this.fileOf(r.user));
      } finally {
        await rm(tmp, { force: true });
      }
    });
  }

  /** Runs a file operation in the users directory, mapping failures to a MeshError that says what to do. */
  private async fs<T>(what: string, op: () => Promise<T>): Promise<T> {
    if (this.usersDirProblem) throw this.usersDirProblem;
    try {
      return await op();
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (
        code === "ENOENT" &&
        !(await stat(this.usersDir).then(
          () => true,
          () => false,
        ))
      ) {
        throw new MeshError(
          ErrorCodes.ProviderMisconfigured,
          `provider ${this.provider.name}: its users directory ${this.usersDir} (options.usersDir) does not exist, so could not ${what}; create it on the registry's host, owned by the provisioner's user and readable by Verdaccio's, and name the same directory in Verdaccio's config under auth.mesh-scopes.usersDir`,
          { cause: e },
        );
      }
      if (code === "ENOENT") throw new MeshError(ErrorCodes.ProviderRejected, `could not ${what}: ${errorMessage(e)}`, { cause: e });
      throw new MeshError(
        ErrorCodes.ProviderMisconfigured,
        `provider ${this.provider.name}: could not ${what} in its users directory ${this.usersDir} (${code ?? errorMessage(e)}); the provisioner must be able to write there (it runs on the registry's host, or the directory is shared with it)`,
        { cause: e },
      );
    }
  }

  /**
   * Throws the users directory's problem (terminal: it needs the document fixed, so it is said
   * before anything retryable), else `ProviderUnreachable` (retryable) unless the registry
   * answers `/-/ping`.
   */
  private async reachable(what: string): Promise<void> {
    if (this.usersDirProblem) throw this.usersDirProblem;
    let why: string;
    try {
      const res = await verifyingFetch(new URL("-/ping", this.registry), { signal: AbortSignal.timeout(REGISTRY_TIMEOUT_MS) }, this.provider.tls);
      await res.body?.cancel();
      if (res.ok) return;
      why = `HTTP ${res.status} on /-/ping`;
    } catch (e) {
      const tls = unverifiedServer(`npm registry provider ${this.provider.name} at ${this.registry}`, what, e, Boolean(this.provider.tls));
      if (tls) throw tls;
      why = fetchFailureCause(e, REGISTRY_TIMEOUT_MS);
    }
    throw new MeshError(
      ErrorCodes.ProviderUnreachable,
      `npm registry provider ${this.provider.name} at ${this.registry} is unreachable (${why}), so could not ${what}; check that Verdaccio runs there with the mesh-scopes auth plugin, and that endpoint is its URL`,
      { retryable: true },
    );
  }
}

/** Validated names of a request's grant, and the words for its messages. */
function grantNames(grant: { module: string; requirement: string; generation: number }, verb: string) {
  checkGrantRef(grant);
  const { module, requirement, generation } = grant;
  const names = npmNames(module, requirement);
  const base = names.users[0].slice(0, -2);
  return { names, user: npmUserName(base, generation), mark: markOf(module, requirement), what: `${verb} ${module}/${requirement}` };
}

/** The provider's `options.usersDir`: an absolute path. */
function parseUsersDir(provider: ProviderConfig): string {
  const options = provider.options ?? {};
  const bad = (why: string) =>
    new MeshError(
      ErrorCodes.ProviderMisconfigured,
      `provider ${provider.name}: ${why}; set options.usersDir to the absolute path of the directory Verdaccio's mesh-scopes plugin reads users from (its auth.mesh-scopes.usersDir), such as /var/lib/mesh/verdaccio-users`,
    );
  const unknown = Object.keys(options).filter((k) => !KNOWN_OPTIONS.includes(k));
  if (unknown.length > 0) throw bad(`unknown option ${unknown.map((k) => JSON.stringify(k)).join(", ")} (npm.registry knows only ${KNOWN_OPTIONS.join(", ")})`);
  const dir = options.usersDir;
  if (!dir) throw bad("options.usersDir is not set");
  if (typeof dir !== "string") throw bad("options.usersDir is a list; give one directory");
  if (!isAbsolute(dir)) throw bad(`options.usersDir ${JSON.stringify(dir)} is not an absolute path`);
  return dir;
}
