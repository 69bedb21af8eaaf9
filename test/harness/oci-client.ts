/**
 * A registry client as a holder uses one, over the registry's HTTP API with plain fetch (no
 * docker CLI): each request that the registry refuses with a Bearer challenge gets a token from
 * the challenge's realm for the challenge's scope, with the binding's username and password, and
 * is sent again with it, as docker and containerd do. Tokens are kept per scope for as long as
 * the issuer says (`expires_in`), unless `cacheTokens` is off. A binding with `ca.crt` is trusted
 * alone for the registry and its realm, as docker trusts `certs.d/<registry>/ca.crt`.
 */
import { createHash } from "node:crypto";
import { verifyingFetch, type BindingValues } from "@mesh/providers";
import { waitFor } from "./wait.js";

export const OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json";

export class RegistryRefusal extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

export interface ImageRef {
  repository: string;
  tag: string;
}

export class OciHolder {
  private readonly tokens = new Map<string, { token: string; until: number }>();
  constructor(
    public bindings: BindingValues,
    private readonly opts: { cacheTokens?: boolean } = {},
  ) {}

  /** The token the issuer gives for `scope` with the current bindings (throws RegistryRefusal when refused). */
  async token(realm: string, service: string, scope?: string): Promise<{ token: string; expiresIn: number }> {
    const url = new URL(realm);
    url.searchParams.set("service", service);
    if (scope) url.searchParams.set("scope", scope);
    const res = await this.fetch(url, {
      headers: { authorization: `Basic ${Buffer.from(`${this.bindings.username}:${this.bindings.password}`).toString("base64")}` },
    });
    const body = (await res.json().catch(() => ({}))) as { token?: string; expires_in?: number };
    if (!res.ok || !body.token) throw new RegistryRefusal(res.status, `token for ${scope ?? "login"}: HTTP ${res.status}`);
    return { token: body.token, expiresIn: body.expires_in ?? 60 };
  }

  /** A request to the registry at `path` (under /v2/), answering its challenge once. */
  async request(method: string, path: string, init: { body?: Buffer; headers?: Record<string, string>; token?: string } = {}): Promise<Response> {
    const url = path.startsWith("http") ? path : `${this.bindings.url}${path}`;
    const send = (token?: string) =>
      this.fetch(url, {
        method,
        headers: { ...init.headers, ...(token ? { authorization: `Bearer ${token}` } : {}) },
        ...(init.body ? { body: init.body } : {}),
        redirect: "manual",
      });
    if (init.token) return send(init.token);
    const cachedKey = `${method} ${path}`;
    let res = await send(this.cached(cachedKey));
    if (res.status !== 401) return res;
    await res.body?.cancel();
    const challenge = res.headers.get("www-authenticate") ?? "";
    const p = Object.fromEntries([...challenge.matchAll(/([a-z]+)="([^"]*)"/gi)].map((m) => [m[1]!, m[2]!]));
    const { token, expiresIn } = await this.token(p.realm!, p.service!, p.scope);
    if (this.opts.cacheTokens !== false) this.tokens.set(cachedKey, { token, until: Date.now() + expiresIn * 1000 - 1_000 });
    res = await send(token);
    return res;
  }

  /** fetch, verifying an HTTPS server against the binding's `ca.crt` alone when it has one. */
  private fetch(url: string | URL, init: RequestInit): Promise<Response> {
    const ca = this.bindings["ca.crt"];
    return verifyingFetch(url, init, ca ? { ca } : undefined);
  }

  private cached(key: string): string | undefined {
    const t = this.tokens.get(key);
    return t && t.until > Date.now() ? t.token : undefined;
  }

  /** Pushes a blob; returns its digest. */
  async pushBlob(repository: string, data: Buffer): Promise<string> {
    const digest = `sha256:${createHash("sha256").update(data).digest("hex")}`;
    const start = await this.request("POST", `/v2/${repository}/blobs/uploads/`);
    await start.body?.cancel();
    if (start.status !== 202) throw new RegistryRefusal(start.status, `start upload to ${repository}: HTTP ${start.status}`);
    const location = new URL(start.headers.get("location")!, this.bindings.url);
    location.searchParams.set("digest", digest);
    // The upload URL is under the same repository, so the same token scope (push) applies.
    const done = await this.request("PUT", location.toString(), { body: data, headers: { "content-type": "application/octet-stream" } });
    await done.body?.cancel();
    if (done.status !== 201) throw new RegistryRefusal(done.status, `finish upload to ${repository}: HTTP ${done.status}`);
    return digest;
  }

  /** Pushes a one-layer image (config and layer blobs, then the manifest); returns the manifest's digest. */
  async pushImage(ref: ImageRef, layer: Buffer): Promise<{ manifestDigest: string; layerDigest: string }> {
    const config = Buffer.from(JSON.stringify({ architecture: "amd64", os: "linux", rootfs: { type: "layers", diff_ids: [] } }));
    const configDigest = await this.pushBlob(ref.repository, config);
    const layerDigest = await this.pushBlob(ref.repository, layer);
    const manifest = Buffer.from(
      JSON.stringify({
        schemaVersion: 2,
        mediaType: OCI_MANIFEST,
        config: { mediaType: "application/vnd.oci.image.config.v1+json", digest: configDigest, size: config.length },
        layers: [{ mediaType: "application/vnd.oci.image.layer.v1.tar", digest: layerDigest, size: layer.length }],
      }),
    );
    const res = await this.request("PUT", `/v2/${ref.repository}/manifests/${ref.tag}`, { body: manifest, headers: { "content-type": OCI_MANIFEST } });
    await res.body?.cancel();
    if (res.status !== 201) throw new RegistryRefusal(res.status, `push manifest ${ref.repository}:${ref.tag}: HTTP ${res.status}`);
    return { manifestDigest: res.headers.get("docker-content-digest")!, layerDigest };
  }

  /** Pulls the manifest of `ref` and the blob of its first layer. */
  async pullImage(ref: ImageRef): Promise<{ manifest: { layers: { digest: string }[] }; layer: Buffer }> {
    const res = await this.request("GET", `/v2/${ref.repository}/manifests/${ref.tag}`, { headers: { accept: OCI_MANIFEST } });
    if (res.status !== 200) {
      await res.body?.cancel();
      throw new RegistryRefusal(res.status, `pull manifest ${ref.repository}:${ref.tag}: HTTP ${res.status}`);
    }
    const manifest = (await res.json()) as { layers: { digest: string }[] };
    const blob = await this.request("GET", `/v2/${ref.repository}/blobs/${manifest.layers[0]!.digest}`);
    if (blob.status !== 200) {
      await blob.body?.cancel();
      throw new RegistryRefusal(blob.status, `pull blob of ${ref.repository}:${ref.tag}: HTTP ${blob.status}`);
    }
    return { manifest, layer: Buffer.from(await blob.arrayBuffer()) };
  }
}

/**
 * Pulls `ref` again and again with `holder` until stopped, each time with the bindings
 * `refresh` gives (the files its agent wrote, say), recording every failure and checking each
 * pull got `layer`.
 */
export function pullThroughout(holder: OciHolder, ref: ImageRef, layer: Buffer, refresh?: () => BindingValues) {
  const failures: string[] = [];
  let pulls = 0;
  let running = true;
  const loop = (async () => {
    while (running) {
      try {
        if (refresh) holder.bindings = refresh();
        if (!(await holder.pullImage(ref)).layer.equals(layer)) failures.push("pulled another layer");
        pulls++;
      } catch (e) {
        failures.push(String(e));
      }
      await new Promise((r) => setTimeout(r, 10));
    }
  })();
  return {
    failures,
    get pulls() {
      return pulls;
    },
    /** Resolves once `n` more pulls succeeded (or one failed). */
    async past(n: number) {
      const target = pulls + n;
      await waitFor(
        () => `${n} more pulls (${pulls - target + n} came)`,
        () => pulls >= target || failures.length > 0,
        60_000,
        20,
      );
    },
    async stop() {
      running = false;
      await loop;
    },
  };
}
