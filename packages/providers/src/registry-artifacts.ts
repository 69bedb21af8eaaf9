/**
 * The artifacts of a registry grant on a registry server, written and looked up over the
 * server's own HTTP API with the generation's bindings (the credential holders get), as a
 * holder would push: the OCI distribution API for `oci.registry` (a token per repository scope
 * from the registry's Bearer challenge, sent only to the provider's issuer), npm's publish and
 * packument requests for `npm.registry` (HTTP Basic). What a handover copies into (artifacts.ts).
 */
import { ErrorCodes, MeshError } from "@mesh/shared";
import type { Artifact, ArtifactContent, ArtifactSink, BindingValues } from "./adapter.js";
import { artifactId } from "./artifacts.js";
import { fetchFailureCause } from "./fetch-failure.js";
import { basicAuthorization as basic, parseBearerChallenge } from "./http-auth.js";
import { latestAfter } from "./npm-dist-tags.js";

/** How long one request to a registry may take (a blob's upload included). */
const REQUEST_TIMEOUT_MS = 30_000;

/** Throws `ProviderRejected` unless the bindings have `keys`. */
function need(bindings: BindingValues, what: string, keys: string[]): void {
  const lacking = keys.filter((k) => !bindings[k]);
  if (lacking.length) throw new MeshError(ErrorCodes.ProviderRejected, `cannot write to ${what}: the generation's binding lacks ${lacking.join(", ")}`);
}

/** One request; network failures become `ProviderUnreachable` (retryable) naming `what`. */
async function send(what: string, url: string | URL, init: RequestInit): Promise<Response> {
  try {
    return await fetch(url, { ...init, redirect: "manual", signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
  } catch (e) {
    throw new MeshError(
      ErrorCodes.ProviderUnreachable,
      `${what}: the registry at ${new URL(url).origin} did not answer (${fetchFailureCause(e, REQUEST_TIMEOUT_MS)}); the copy resumes where it stopped once it does`,
      { retryable: true, cause: e },
    );
  }
}

async function refused(what: string, res: Response): Promise<MeshError> {
  const text = (await res.text().catch(() => "")).slice(0, 300);
  return new MeshError(ErrorCodes.ProviderRejected, `${what}: HTTP ${res.status}${text ? ` ${text}` : ""}`, {
    retryable: res.status >= 500 || res.status === 429,
  });
}

/**
 * The repositories of an `oci.registry` grant on a distribution registry: `<namespace>/<repository>`.
 * `issuerOrigin` is where the provider's tokens come from: a challenge naming another realm gets no password.
 */
export function ociRegistrySink(bindings: BindingValues, issuerOrigin: string): ArtifactSink {
  need(bindings, "the OCI registry", ["url", "namespace", "username", "password"]);
  const base = bindings.url!.replace(/\/+$/, "");
  const tokens = new Map<string, string>();

  /** A request to `path` under the registry, answering its Bearer challenge with a token for the challenge's scope. */
  const request = async (what: string, method: string, path: string, init: { body?: Uint8Array; headers?: Record<string, string> } = {}): Promise<Response> => {
    const url = path.startsWith("http") ? path : `${base}${path}`;
    const go = (token?: string) =>
      send(what, url, {
        method,
        headers: { ...init.headers, ...(token ? { authorization: `Bearer ${token}` } : {}) },
        ...(init.body ? { body: init.body } : {}),
      });
    // Tokens are per repository (a pull-only one meets a 401 on a push, and is replaced).
    const scopeKey = /\/v2\/(.+?)\/(?:blobs|manifests)\//.exec(url)?.[1] ?? url;
    let res = await go(tokens.get(scopeKey));
    if (res.status !== 401) return res;
    await res.body?.cancel();
    const header = res.headers.get("www-authenticate") ?? "";
    const challenge = parseBearerChallenge(header);
    if (!challenge) {
      throw new MeshError(
        ErrorCodes.ProviderRejected,
        `${what}: the registry at ${base} answered 401 without a Bearer challenge with realm and service (${JSON.stringify(header.slice(0, 200))}); the password was not sent`,
      );
    }
    if (new URL(challenge.realm).origin !== issuerOrigin) {
      throw new MeshError(
        ErrorCodes.ProviderRejected,
        `${what}: the registry at ${base} sends clients to the token realm ${challenge.realm}, not to the provider's issuer ${issuerOrigin}; the password was not sent there`,
      );
    }
    const tokenUrl = new URL(challenge.realm);
    tokenUrl.searchParams.set("service", challenge.service);
    if (challenge.scope) tokenUrl.searchParams.set("scope", challenge.scope);
    const t = await send(what, tokenUrl, { headers: { authorization: basic(bindings.username!, bindings.password!) } });
    const body = (await t.json().catch(() => ({}))) as { token?: string };
    if (!t.ok || !body.token)
      throw new MeshError(
        ErrorCodes.ProviderRejected,
        `${what}: the token issuer refused ${bindings.username} a token for ${challenge.scope ?? "the registry"} (HTTP ${t.status})`,
      );
    tokens.set(scopeKey, body.token);
    res = await go(body.token);
    return res;
  };

  const repo = (a: Extract<Artifact, { type: "blob" | "manifest" }>) => `${bindings.namespace}/${a.repository}`;

  return {
    async has(a) {
      if (a.type === "package") throw new MeshError(ErrorCodes.InvalidRequest, `an OCI registry holds no ${artifactId(a)}`);
      const path = a.type === "blob" ? `/v2/${repo(a)}/blobs/${a.digest}` : `/v2/${repo(a)}/manifests/${a.tag}`;
      const what = `looking up ${artifactId(a)} at ${base}`;
      const res = await request(what, "HEAD", path, a.type === "manifest" ? { headers: { accept: ACCEPTED_MANIFESTS } } : {});
      await res.body?.cancel();
      if (res.status === 404) return false;
      if (!res.ok) throw await refused(what, res);
      const digest = res.headers.get("docker-content-digest");
      if (a.type === "manifest" && digest && digest !== a.digest) {
        throw new MeshError(
          ErrorCodes.Conflict,
          `${repo(a)}:${a.tag} at ${base} is manifest ${digest}, not the ${a.digest} being carried over: a tag is not overwritten by a copy; delete or retag it there, and the copy resumes`,
        );
      }
      return true;
    },
    async write(a: Artifact, content: ArtifactContent) {
      if (a.type === "package") throw new MeshError(ErrorCodes.InvalidRequest, `an OCI registry holds no ${artifactId(a)}`);
      const what = `copying ${artifactId(a)} to ${base}`;
      if (a.type === "manifest") {
        const res = await request(what, "PUT", `/v2/${repo(a)}/manifests/${a.tag}`, {
          body: content.data,
          headers: { "content-type": content.mediaType ?? "application/vnd.oci.image.manifest.v1+json" },
        });
        if (res.status !== 201) throw await refused(what, res);
        await res.body?.cancel();
        return;
      }
      // A monolithic upload: POST opens it, PUT with the digest closes it with the bytes.
      const start = await request(what, "POST", `/v2/${repo(a)}/blobs/uploads/`);
      if (start.status !== 202) throw await refused(what, start);
      await start.body?.cancel();
      const location = new URL(start.headers.get("location") ?? "", base);
      location.searchParams.set("digest", a.digest);
      const done = await request(what, "PUT", location.toString(), { body: content.data, headers: { "content-type": "application/octet-stream" } });
      if (done.status !== 201) throw await refused(what, done);
      await done.body?.cancel();
    },
  };
}

/** The manifest types a lookup accepts (a registry answers 404 for a stored type the client does not name). */
const ACCEPTED_MANIFESTS = [
  "application/vnd.oci.image.manifest.v1+json",
  "application/vnd.oci.image.index.v1+json",
  "application/vnd.docker.distribution.manifest.v2+json",
  "application/vnd.docker.distribution.manifest.list.v2+json",
].join(", ");

/** The packages of an `npm.registry` grant on an npm registry: `<scope>/<name>`, published as `npm publish` does. */
export function npmRegistrySink(bindings: BindingValues): ArtifactSink {
  need(bindings, "the npm registry", ["registry", "scope", "username", "password"]);
  const registry = bindings.registry!.endsWith("/") ? bindings.registry! : `${bindings.registry}/`;
  const auth = basic(bindings.username!, bindings.password!);
  const full = (name: string) => `${bindings.scope}/${name}`;
  const packumentUrl = (name: string) => new URL(encodeURIComponent(full(name)).replace(/^%40/, "@"), registry);
  /** Each package's `latest` dist-tag at the registry, as last read or written (undefined: it has none). */
  const latestOf = new Map<string, string | undefined>();

  /** The package's packument at the registry, undefined when it has none; its `latest` is remembered. */
  const packument = async (what: string, name: string): Promise<Packument | undefined> => {
    const res = await send(what, packumentUrl(name), { headers: { authorization: auth, accept: "application/json" } });
    if (res.status === 404) {
      await res.body?.cancel();
      latestOf.set(name, undefined);
      return undefined;
    }
    if (!res.ok) throw await refused(what, res);
    const p = (await res.json()) as Packument;
    latestOf.set(name, typeof p["dist-tags"]?.latest === "string" ? p["dist-tags"].latest : undefined);
    return p;
  };

  return {
    async has(a) {
      if (a.type !== "package") throw new MeshError(ErrorCodes.InvalidRequest, `an npm registry holds no ${artifactId(a)}`);
      const p = await packument(`looking up ${full(a.name)}@${a.version} at ${registry}`, a.name);
      const v = p?.versions?.[a.version];
      if (!v) return false;
      if (v.dist?.shasum && v.dist.shasum !== a.shasum) {
        throw new MeshError(
          ErrorCodes.Conflict,
          `${full(a.name)}@${a.version} at ${registry} is another tarball (sha1 ${v.dist.shasum}) than the one being carried over (${a.shasum}): a published version is never replaced; unpublish it there, or publish the source's under a new version`,
        );
      }
      return true;
    },
    async write(a, content) {
      if (a.type !== "package") throw new MeshError(ErrorCodes.InvalidRequest, `an npm registry holds no ${artifactId(a)}`);
      const name = full(a.name);
      const what = `publishing ${name}@${a.version} to ${registry}`;
      const file = `${a.name}-${a.version}.tgz`;
      const version = {
        ...content.manifest,
        name,
        version: a.version,
        _id: `${name}@${a.version}`,
        dist: {
          ...((content.manifest?.dist as object | undefined) ?? {}),
          shasum: a.shasum,
          tarball: new URL(`${encodeURIComponent(name).replace(/^%40/, "@")}/-/${file}`, registry).toString(),
        },
      };
      // `latest` moves only up, by semver: versions arrive in name order, and some may be there already.
      if (!latestOf.has(a.name)) await packument(`looking up ${name}'s dist-tags at ${registry}`, a.name);
      const latest = latestAfter(latestOf.get(a.name), a.version);
      const body = {
        _id: name,
        name,
        "dist-tags": { latest },
        versions: { [a.version]: version },
        _attachments: {
          [file]: { content_type: "application/octet-stream", data: Buffer.from(content.data).toString("base64"), length: content.data.byteLength },
        },
      };
      const res = await send(what, packumentUrl(a.name), {
        method: "PUT",
        headers: { authorization: auth, "content-type": "application/json" },
        body: JSON.stringify(body),
      });
      if (!res.ok) throw await refused(what, res);
      await res.body?.cancel();
      latestOf.set(a.name, latest);
    },
  };
}

/** What a copy reads of a packument. */
interface Packument {
  "dist-tags"?: { latest?: unknown };
  versions?: Record<string, { dist?: { shasum?: string } }>;
}
