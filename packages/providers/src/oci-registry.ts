/**
 * The adapter of kind `oci.registry`: a repository namespace `<module>/…` on a CNCF distribution
 * registry (Debian's `docker-registry`) that authenticates with tokens from the mesh's token
 * issuer (services/oci-token-issuer). The registry itself holds no users: it trusts the tokens
 * the issuer signs, and each token names the repositories it allows. So this adapter manages
 * users at the issuer, through its admin API: per grant the user `<module>.<requirement>`, whose
 * tokens allow `pull` and `push` on `<module>/…` and nothing else (oci-token-scope.ts).
 *
 * Overlap (docs/design.md, "Overlap per backend"): the user holds two password hashes, one per
 * alternating slot (odd generations `a`, even `b`), as a Redis ACL user does, so generation k+1
 * logs in beside k. Retiring k removes its hash: from then on k gets no token, and the tokens
 * it got before stop working within the issuer's token lifetime (60 s at most). Passwords go to
 * the issuer as salted scrypt hashes; the plaintext never leaves the provisioner.
 *
 * The images stay when a grant is deleted: the namespace is the module's, shared by its
 * `oci.registry` grants, and the registry's API cannot delete a repository. So the kind is a
 * credential (as `redis.user`, whose keys under `<module>:` stay), not a data kind.
 *
 * Provider document: `endpoint` the registry (`http://host:port`, what holders push to);
 * `options.issuerUrl` the issuer (`http://host:port`); `admin` the issuer's admin. With `tls:`
 * both are `https://` and verified against its bundle (provider-tls.ts), the admin's calls, the
 * logins and the handovers' copies alike; bindings carry the bundle as `ca.crt`, the name docker
 * reads it by (`/etc/docker/certs.d/<registry>/ca.crt`).
 */
import { ErrorCodes, Kinds, MeshError } from "@mesh/shared";
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
import { checkGrantRef } from "./grant-ref.js";
import { generatePassword, passwordOf } from "./password.js";
import { hostPort, parseEndpoint } from "./endpoint.js";
import { fetchFailureCause } from "./fetch-failure.js";
import { basicAuthorization as basic, parseBearerChallenge } from "./http-auth.js";
import { hashPassword, ociNames, type OciNames } from "./oci-token-scope.js";
import { bindingCa, caBindings, checkHttpsTls, trustsResource, unverifiedLogin, unverifiedServer, verifyingFetch } from "./provider-tls.js";
import { ociRegistrySink } from "./registry-artifacts.js";

/** How long each request of a login may take. */
const LOGIN_TIMEOUT_MS = 3_000;
/** How long each admin request may take. */
const ADMIN_TIMEOUT_MS = 5_000;
const KNOWN_OPTIONS = ["issuerUrl"];

/** Makes the `oci.registry` adapter of `provider`; throws `ProviderMisconfigured` for a bad endpoint or `options.issuerUrl`. */
export const createOciRegistryAdapter: AdapterFactory = (provider) => new OciRegistryAdapter(provider);

interface GeneratedUser {
  user: string;
  mark: string;
  namespace: string;
  generations: Partial<Record<"a" | "b", number>>;
}

class OciRegistryAdapter implements ProviderAdapter {
  readonly kinds = [Kinds.OciRegistry] as const;
  private readonly registry: { url: string; host: string; port: number };
  private readonly issuerUrl: string;

  constructor(private readonly provider: ProviderConfig) {
    const e = parseEndpoint(provider, {
      schemes: ["http", "https"],
      example: "http://127.0.0.1:5000 (the registry holders push to)",
      defaultPort: (scheme) => (scheme === "https" ? 443 : 80),
      refusePath: "names a path; each grant gets the namespace of its module",
    });
    this.registry = { url: `${e.scheme}://${hostPort(e.host, e.port)}`, host: e.host, port: e.port };
    this.issuerUrl = parseIssuerUrl(provider);
    checkHttpsTls(provider, "docker", { endpoint: provider.endpoint, "options.issuerUrl": this.issuerUrl });
  }

  generate() {
    return generatePassword();
  }

  async observe(req: ObserveRequest): Promise<ObserveResult> {
    const { names, generation } = grantNames(req.grant);
    const user = await this.admin<GeneratedUser>(`observe ${names.mark}`, "GET", userPath(names));
    if (!user) return { exists: false, details: {}, missing: ["user"] };
    if (user.mark !== names.mark) return { exists: false, details: { conflict: conflictOf(names, user.mark) } };
    const exists = Object.values(user.generations).includes(generation);
    return {
      exists,
      details: { user: names.user, namespace: names.namespace, ...(exists ? {} : { password: `generation ${generation} has none` }) },
      ...(exists ? {} : { missing: [`password of generation ${generation}`] }),
    };
  }

  async create(req: CreateRequest): Promise<CreateResult> {
    const { names, generation } = grantNames(req.grant);
    const password = passwordOf(req);
    const hash = await hashPassword(password);
    await this.admin(`create ${names.mark}`, "PUT", `${userPath(names)}/generations/${generation}`, { hash });
    const { url, host, port } = this.registry;
    return {
      resource: { user: names.user, namespace: names.namespace, ...trustsResource(this.provider.tls) },
      bindings: {
        type: "oci",
        provider: this.provider.name,
        host,
        port: String(port),
        // What `docker login` and image references take: `<registry>/<namespace>/<name>:<tag>`.
        registry: hostPort(host, port),
        url,
        namespace: names.namespace,
        username: names.user,
        password,
        ...caBindings(this.provider.tls),
      },
    };
  }

  async delete(req: DeleteRequest): Promise<void> {
    checkGrantRef(req.grant);
    const names = ociNames(req.grant.module, req.grant.requirement);
    await this.admin(`delete ${names.mark}`, "DELETE", userPath(names));
  }

  /**
   * Removes generation `req.grant.generation`'s password hash, if its slot still holds that
   * generation (a later one that took the slot is left alone; the issuer checks). Tokens the
   * generation got before stop working within the token lifetime.
   */
  async retire(req: RetireRequest): Promise<void> {
    const { names, generation } = grantNames(req.grant);
    await this.admin(`retire generation ${generation} of ${names.mark}`, "DELETE", `${userPath(names)}/generations/${generation}`);
  }

  /**
   * Logs in as `docker login` does: `GET /v2/` is refused with a Bearer challenge naming the
   * realm and service; a token is fetched there with the binding's username and password; `GET
   * /v2/` with it must succeed. The password is sent only to this provider's issuer: a registry
   * whose challenge names another realm is reported, and nothing is sent.
   */
  async login(req: LoginRequest): Promise<LoginResult> {
    const b = req.bindings;
    const lacking = ["url", "username", "password"].filter((k) => !b[k]);
    if (lacking.length > 0) return { ok: false, reason: "rejected", message: `the binding lacks ${lacking.join(", ")}` };
    const v2 = `${b.url!.replace(/\/+$/, "")}/v2/`;
    const tls = bindingCa(b);
    const unreachable = (what: string, e: unknown): LoginResult =>
      unverifiedLogin(`the registry at ${b.url} (${what})`, e, Boolean(tls)) ?? {
        ok: false,
        reason: "unreachable",
        message: `cannot log in to the registry at ${b.url}: ${what} failed (${fetchFailureCause(e, LOGIN_TIMEOUT_MS)})`,
      };
    let challenge: Response;
    try {
      challenge = await verifyingFetch(v2, { signal: AbortSignal.timeout(LOGIN_TIMEOUT_MS) }, tls);
      await challenge.body?.cancel();
    } catch (e) {
      return unreachable(`GET ${v2}`, e);
    }
    if (challenge.status !== 401) {
      return {
        ok: false,
        reason: "rejected",
        message: `the registry at ${b.url} answered GET /v2/ without a credential with HTTP ${challenge.status}, not 401: it does not ask for the mesh's tokens; configure its auth.token (see examples/providers/oci-registry.yaml)`,
      };
    }
    const bearer = parseBearerChallenge(challenge.headers.get("www-authenticate") ?? "");
    if (!bearer) return { ok: false, reason: "rejected", message: `the registry at ${b.url} did not send a Bearer challenge with realm and service` };
    if (new URL(bearer.realm).origin !== new URL(this.issuerUrl).origin) {
      return {
        ok: false,
        reason: "rejected",
        message: `the registry at ${b.url} sends clients to the token realm ${bearer.realm}, not to this provider's issuer ${this.issuerUrl}; the password was not sent there`,
      };
    }
    const tokenUrl = new URL(bearer.realm);
    tokenUrl.searchParams.set("service", bearer.service);
    tokenUrl.searchParams.set("account", b.username!);
    let token: string;
    try {
      const res = await verifyingFetch(
        tokenUrl,
        { headers: { authorization: basic(b.username!, b.password!) }, signal: AbortSignal.timeout(LOGIN_TIMEOUT_MS) },
        tls,
      );
      const body = (await res.json().catch(() => ({}))) as { token?: string; errors?: { message?: string }[] };
      if (res.status === 401) return { ok: false, reason: "rejected", message: `the token issuer at ${tokenUrl.origin} rejected ${b.username}` };
      // Failed logins of this user or address hit the issuer's limit (anyone may cause that): says nothing of this credential.
      if (res.status === 429)
        return {
          ok: false,
          reason: "unreachable",
          message: `the token issuer at ${tokenUrl.origin} is limiting logins of ${b.username} after failed ones; retry after ${res.headers.get("retry-after") ?? "a while"} s`,
        };
      if (!res.ok || !body.token)
        return {
          ok: false,
          reason: "rejected",
          message: `the token issuer at ${tokenUrl.origin} answered HTTP ${res.status}: ${body.errors?.[0]?.message ?? "no token"}`,
        };
      token = body.token;
    } catch (e) {
      return unreachable(`the token request to ${tokenUrl.origin}`, e);
    }
    try {
      const res = await verifyingFetch(v2, { headers: { authorization: `Bearer ${token}` }, signal: AbortSignal.timeout(LOGIN_TIMEOUT_MS) }, tls);
      await res.body?.cancel();
      if (res.ok) return { ok: true };
      return {
        ok: false,
        reason: "rejected",
        message: `the registry at ${b.url} refused the token the issuer gave ${b.username} (HTTP ${res.status}); check that its auth.token issuer, service and rootcertbundle are the issuer's`,
      };
    } catch (e) {
      return unreachable(`GET ${v2} with the token`, e);
    }
  }

  /**
   * Where a handover writes the grant's images: the namespace, through the generation's own
   * credential, as a holder pushes. No source: the registry lists repositories only in its
   * catalog, which a namespace's credential may not read.
   */
  async artifactSink(req: ArtifactRequest): Promise<ArtifactSink> {
    checkGrantRef(req.grant);
    return ociRegistrySink(req.bindings, new URL(this.issuerUrl).origin);
  }

  async close(): Promise<void> {
    // Nothing held: every call is a request of its own.
  }

  /** One admin request to the issuer; undefined for a GET of what is not there. Maps every failure to a MeshError that says what to do. */
  private async admin<T>(what: string, method: "GET" | "PUT" | "DELETE", path: string, body?: unknown): Promise<T | undefined> {
    const admin = this.provider.admin;
    if (!admin?.password) {
      throw new MeshError(
        ErrorCodes.ProviderMisconfigured,
        `${this.at()} has no admin password, so could not ${what}; give admin.username and admin.passwordFile (the issuer's admin-password file) or admin.passwordEnv`,
      );
    }
    let res: Response;
    try {
      res = await verifyingFetch(
        `${this.issuerUrl}${path}`,
        {
          method,
          headers: { authorization: basic(admin.username, admin.password), ...(body === undefined ? {} : { "content-type": "application/json" }) },
          ...(body === undefined ? {} : { body: JSON.stringify(body) }),
          signal: AbortSignal.timeout(ADMIN_TIMEOUT_MS),
        },
        this.provider.tls,
      );
    } catch (e) {
      const tls = unverifiedServer(this.at(), what, e, Boolean(this.provider.tls));
      if (tls) throw tls;
      throw new MeshError(
        ErrorCodes.ProviderUnreachable,
        `${this.at()} is unreachable (${fetchFailureCause(e, ADMIN_TIMEOUT_MS)}), so could not ${what}; check that mesh-oci-token-issuer runs and listens at options.issuerUrl`,
        { retryable: true, cause: e },
      );
    }
    const text = await res.text().catch(() => "");
    if (res.ok) return text === "" ? undefined : (JSON.parse(text) as T);
    if (res.status === 404 && method === "GET") return undefined;
    let reason = "";
    try {
      reason = (JSON.parse(text) as { errors?: { message?: string }[] }).errors?.[0]?.message ?? "";
    } catch {
      // not JSON: the status says enough
    }
    const why = `HTTP ${res.status}${reason ? ` ${reason.slice(0, 200)}` : ""}`;
    if (res.status === 401) {
      throw new MeshError(
        ErrorCodes.ProviderMisconfigured,
        `${this.at()} rejected the admin user ${JSON.stringify(admin.username)} (${why}), so could not ${what}; check admin.username (the issuer's MESH_OCI_ISSUER_ADMIN_USER) and the password given by the provider's admin.passwordFile or admin.passwordEnv`,
      );
    }
    if (res.status === 409) throw new MeshError(ErrorCodes.Conflict, `${this.at()}: ${reason || why}; delete or rename that user, or rename the requirement`);
    throw new MeshError(ErrorCodes.ProviderRejected, `${this.at()} refused to ${what}: ${why}`, { retryable: res.status >= 500 });
  }

  private at(): string {
    return `OCI registry provider ${this.provider.name} (registry ${this.registry.url}, token issuer ${this.issuerUrl})`;
  }
}

/** Validated names of a request's grant. */
function grantNames(grant: ObserveRequest["grant"]): { names: OciNames; generation: number } {
  checkGrantRef(grant);
  return { names: ociNames(grant.module, grant.requirement), generation: grant.generation };
}

// Names are valid mesh names joined by a dot; encoded all the same.
const userPath = (names: OciNames) => `/admin/users/${encodeURIComponent(names.user)}`;

function conflictOf(names: OciNames, mark: string): string {
  return `the token issuer's user ${names.user} belongs to ${mark}, not ${names.mark}`;
}

/** The provider's `options.issuerUrl`, validated, without a trailing slash. */
function parseIssuerUrl(provider: ProviderConfig): string {
  const options = provider.options ?? {};
  const bad = (why: string) =>
    new MeshError(
      ErrorCodes.ProviderMisconfigured,
      `provider ${provider.name}: ${why}; set options.issuerUrl to where mesh-oci-token-issuer listens, such as http://127.0.0.1:5001`,
    );
  const unknown = Object.keys(options).filter((k) => !KNOWN_OPTIONS.includes(k));
  if (unknown.length > 0) throw bad(`unknown option ${unknown.map((k) => JSON.stringify(k)).join(", ")} (oci.registry knows only ${KNOWN_OPTIONS.join(", ")})`);
  const raw = options.issuerUrl;
  if (!raw) throw bad("options.issuerUrl is not set");
  if (typeof raw !== "string") throw bad("options.issuerUrl is a list; give one URL");
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw bad(`options.issuerUrl ${JSON.stringify(raw)} is not a URL`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") throw bad(`options.issuerUrl ${JSON.stringify(raw)} is not an http:// or https:// URL`);
  if (url.username || url.password) throw bad("options.issuerUrl holds a user; the admin goes in admin.username and admin.passwordFile or admin.passwordEnv");
  if (url.pathname !== "/" || url.search || url.hash) throw bad(`options.issuerUrl ${JSON.stringify(raw)} has a path, query or fragment`);
  return url.origin;
}
