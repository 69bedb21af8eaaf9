/**
 * The artifacts of a registry grant on a registry server, written and looked up over the
 * server's own HTTP API with the generation's bindings (the credential holders get), as a
 * holder would push: the OCI distribution API for `oci.registry` (a token per repository scope
 * from the registry's Bearer challenge, sent only to the provider's issuer; a blob in chunks,
 * resumed where the registry stands after a failure), npm's publish and packument requests for
 * `npm.registry` (HTTP Basic). What a handover copies into (artifacts.ts).
 */
import { ErrorCodes, MeshError, backoffMs, sleep } from "@mesh/shared";
import type { Artifact, ArtifactContent, ArtifactSink, BindingValues, OpenBlob, ServerTls } from "./adapter.js";
import { artifactId } from "./artifacts.js";
import { BLOB_CHUNK_BYTES, MAX_BLOB_CHUNK_BYTES, chunkSize, chunksOf, heldAfterChunk, resumeAt, uploadedBytes } from "./blob-chunks.js";
import { fetchFailureCause } from "./fetch-failure.js";
import { basicAuthorization as basic, parseBearerChallenge } from "./http-auth.js";
import { latestAfter } from "./npm-dist-tags.js";
import { bindingCa, tlsFailure, verifyingFetch } from "./provider-tls.js";

/** How long one request to a registry may take (a chunk of a blob's upload included). */
const REQUEST_TIMEOUT_MS = 30_000;
/** Failures in a row a blob's upload lives through (each waited out, then the registry asked where the upload stands) before it gives up. */
const UPLOAD_TRIES = 5;
/** The wait after an upload's failure, doubling from there. */
const UPLOAD_BACKOFF = { firstMs: 250, maxMs: 4_000 };

/** Throws `ProviderRejected` unless the bindings have `keys`. */
function need(bindings: BindingValues, what: string, keys: string[]): void {
  const lacking = keys.filter((k) => !bindings[k]);
  if (lacking.length) throw new MeshError(ErrorCodes.ProviderRejected, `cannot write to ${what}: the generation's binding lacks ${lacking.join(", ")}`);
}

/**
 * One request, verifying an `https://` server against `tls` (the binding's `ca.crt`) when given;
 * network failures become `ProviderUnreachable` (retryable) naming `what`, and a server that does
 * not verify says why.
 */
async function send(what: string, url: string | URL, init: RequestInit, tls: ServerTls | undefined): Promise<Response> {
  try {
    return await verifyingFetch(url, { ...init, redirect: "manual", signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) }, tls);
  } catch (e) {
    const origin = new URL(url).origin;
    const unverified = tls ? tlsFailure(e, true) : undefined;
    throw new MeshError(
      ErrorCodes.ProviderUnreachable,
      unverified
        ? `${what}: the registry at ${origin} cannot be reached over verified TLS: ${unverified}`
        : `${what}: the registry at ${origin} did not answer (${fetchFailureCause(e, REQUEST_TIMEOUT_MS)}); the copy resumes where it stopped once it does`,
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

/** A request to a registry: `path` under it, or a URL it gave (an upload's). */
type RegistryRequest = (what: string, method: string, path: string, init?: { body?: Uint8Array; headers?: Record<string, string> }) => Promise<Response>;

/**
 * The repositories of an `oci.registry` grant on a distribution registry: `<namespace>/<repository>`.
 * `issuerOrigin` is where the provider's tokens come from: a challenge naming another realm gets no password.
 * A blob is uploaded in chunks of `chunkBytes` (default {@link BLOB_CHUNK_BYTES}), one held at a time.
 */
export function ociRegistrySink(bindings: BindingValues, issuerOrigin: string, opts: { chunkBytes?: number } = {}): ArtifactSink {
  need(bindings, "the OCI registry", ["url", "namespace", "username", "password"]);
  const base = bindings.url!.replace(/\/+$/, "");
  const tls = bindingCa(bindings);
  const tokens = new Map<string, string>();
  const chunkBytes = Math.min(opts.chunkBytes ?? BLOB_CHUNK_BYTES, MAX_BLOB_CHUNK_BYTES);

  /** A request to `path` under the registry, answering its Bearer challenge with a token for the challenge's scope. */
  const request: RegistryRequest = async (what, method, path, init = {}) => {
    const url = path.startsWith("http") ? path : `${base}${path}`;
    const go = (token?: string) =>
      send(
        what,
        url,
        {
          method,
          headers: { ...init.headers, ...(token ? { authorization: `Bearer ${token}` } : {}) },
          ...(init.body ? { body: init.body } : {}),
        },
        tls,
      );
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
    const t = await send(what, tokenUrl, { headers: { authorization: basic(bindings.username!, bindings.password!) } }, tls);
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
    async write(a, content: ArtifactContent) {
      if (a.type !== "manifest") throw new MeshError(ErrorCodes.InvalidRequest, `an OCI registry holds no ${artifactId(a)}`);
      const what = `copying ${artifactId(a)} to ${base}`;
      const res = await request(what, "PUT", `/v2/${repo(a)}/manifests/${a.tag}`, {
        body: content.data,
        headers: { "content-type": content.mediaType ?? "application/vnd.oci.image.manifest.v1+json" },
      });
      if (res.status !== 201) throw await refused(what, res);
      await res.body?.cancel();
    },
    writeBlob: (a, open) => uploadBlob(request, { what: `copying ${artifactId(a)} to ${base}`, base, repo: repo(a), digest: a.digest }, open, chunkBytes),
  };
}

/**
 * Uploads a blob into `repo` in chunks read from `open`'s stream, one held at a time (the OCI
 * distribution spec's chunked upload): POST opens the upload, a PATCH sends each chunk with
 * its `Content-Range`, PUT with the digest closes it, and the registry checks the digest then.
 *
 * A request that fails in the middle (no answer, or 5xx or 429) is waited out and the
 * upload's URL asked how much it holds (GET, `Range`); the upload goes on from there within
 * the chunk in hand. A registry that lost the upload, or holds less than the chunk in hand
 * starts with, has it start over from a fresh read. {@link UPLOAD_TRIES} failures in a row
 * end it with the last one; a failure of the source's stream ends it at once. An upload left
 * unfinished is the registry's to purge (distribution drops old ones by itself): the grant's
 * credential may push, not delete.
 */
async function uploadBlob(
  request: RegistryRequest,
  b: { what: string; base: string; repo: string; digest: string },
  open: OpenBlob,
  chunkBytes: number,
): Promise<void> {
  const { what } = b;
  let failures = 0;
  /** Lives through a retryable failure, waiting before the next try; throws it once there were too many in a row. */
  const survive = async (e: unknown) => {
    if (!(e instanceof MeshError && e.retryable) || ++failures >= UPLOAD_TRIES) throw e;
    await sleep(backoffMs(failures, UPLOAD_BACKOFF));
  };
  /** `fn` until it answers, living through failures. */
  const retrying = async <T>(fn: () => Promise<T>): Promise<T> => {
    for (;;) {
      try {
        return await fn();
      } catch (e) {
        await survive(e);
      }
    }
  };
  const locationOf = (res: Response, current: string) => {
    const l = res.headers.get("location");
    return l ? new URL(l, b.base).toString() : current;
  };
  /** Where the upload at `location` stands (its URL now, the bytes it holds); undefined when the registry has it no more. */
  const status = (location: string) =>
    retrying(async () => {
      const res = await request(`${what} (asking where its upload stands)`, "GET", location);
      if (res.status === 400 || res.status === 404 || res.status === 416) {
        await res.body?.cancel();
        return undefined;
      }
      if (res.status !== 204 && res.status !== 200) throw await refused(what, res);
      await res.body?.cancel();
      return { location: locationOf(res, location), held: uploadedBytes(res.headers.get("range")) };
    });
  /** Whether the registry has the blob (a closing PUT whose answer was lost may have landed). */
  const there = () =>
    retrying(async () => {
      const res = await request(what, "HEAD", `/v2/${b.repo}/blobs/${b.digest}`);
      await res.body?.cancel();
      if (res.status === 404) return false;
      if (!res.ok) throw await refused(what, res);
      return true;
    });

  /** One upload from the first byte: whether the blob is there after it (false: start over). */
  const once = async (): Promise<boolean> => {
    const opened = await retrying(async () => {
      const res = await request(what, "POST", `/v2/${b.repo}/blobs/uploads/`);
      if (res.status !== 202) throw await refused(what, res);
      await res.body?.cancel();
      const size = chunkSize(chunkBytes, res.headers.get("oci-chunk-min-length"));
      if (size === undefined) {
        throw new MeshError(
          ErrorCodes.ProviderRejected,
          `${what}: the registry asks for upload chunks of at least ${res.headers.get("oci-chunk-min-length")} bytes (OCI-Chunk-Min-Length), more than the ${MAX_BLOB_CHUNK_BYTES} a copy holds in memory; lower the registry's minimum`,
        );
      }
      if (!res.headers.get("location"))
        throw new MeshError(ErrorCodes.ProviderRejected, `${what}: the registry opened an upload without saying where (no Location)`);
      return { location: locationOf(res, ""), size };
    });
    let location = opened.location;
    let held = 0;
    for await (const chunk of chunksOf(await open(), opened.size)) {
      const start = held;
      const end = start + chunk.byteLength;
      while (held < end) {
        try {
          const res = await request(what, "PATCH", location, {
            body: chunk.subarray(held - start),
            headers: { "content-type": "application/octet-stream", "content-range": `${held}-${end - 1}` },
          });
          if (res.status !== 202) throw await refused(what, res);
          await res.body?.cancel();
          location = locationOf(res, location);
          const now = resumeAt(start, end, heldAfterChunk(res.headers.get("range"), end));
          if (now === undefined) return false;
          if (now <= held)
            throw new MeshError(ErrorCodes.ProviderRejected, `${what}: the registry took none of the chunk at byte ${held}`, { retryable: true });
          held = now;
          failures = 0;
        } catch (e) {
          await survive(e);
          const at = await status(location);
          const now = at ? resumeAt(start, end, at.held) : undefined;
          if (!at || now === undefined) return false;
          location = at.location;
          held = now;
        }
      }
    }
    for (;;) {
      const closing = new URL(location);
      closing.searchParams.set("digest", b.digest);
      try {
        const res = await request(what, "PUT", closing.toString(), { headers: { "content-type": "application/octet-stream" } });
        if (res.status !== 201) throw await refused(what, res);
        await res.body?.cancel();
        return true;
      } catch (e) {
        await survive(e);
        const at = await status(location);
        if (!at) return there();
        if (at.held !== held) return false;
        location = at.location;
      }
    }
  };

  while (!(await once())) {
    await survive(new MeshError(ErrorCodes.ProviderUnreachable, `${what}: the registry lost the upload in the middle; it starts over`, { retryable: true }));
  }
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
  const tls = bindingCa(bindings);
  const full = (name: string) => `${bindings.scope}/${name}`;
  const packumentUrl = (name: string) => new URL(encodeURIComponent(full(name)).replace(/^%40/, "@"), registry);
  /** Each package's `latest` dist-tag at the registry, as last read or written (undefined: it has none). */
  const latestOf = new Map<string, string | undefined>();

  /** The package's packument at the registry, undefined when it has none; its `latest` is remembered. */
  const packument = async (what: string, name: string): Promise<Packument | undefined> => {
    const res = await send(what, packumentUrl(name), { headers: { authorization: auth, accept: "application/json" } }, tls);
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
      const res = await send(
        what,
        packumentUrl(a.name),
        {
          method: "PUT",
          headers: { authorization: auth, "content-type": "application/json" },
          body: JSON.stringify(body),
        },
        tls,
      );
      if (!res.ok) throw await refused(what, res);
      await res.body?.cancel();
      latestOf.set(a.name, latest);
    },
    async writeBlob(a) {
      throw new MeshError(ErrorCodes.InvalidRequest, `an npm registry holds no ${artifactId(a)}`);
    },
  };
}

/** What a copy reads of a packument. */
interface Packument {
  "dist-tags"?: { latest?: unknown };
  versions?: Record<string, { dist?: { shasum?: string } }>;
}
