/**
 * What `oci.registry` must do, against a distribution registry of the test's own and
 * the mesh's token issuer: push and pull of an image manifest and blob over the registry's HTTP
 * API with the delivered credential; refused outside the module's namespace and with a retired
 * generation; a rotation with a holder pulling throughout, and no failure. And a handover's
 * copy into it from the bootstrap registry: a large blob streamed in bounded chunks, an upload
 * that goes on where it stood after a chunk is lost, and one that starts over when the
 * registry lost it.
 */
import { createCipheriv, createHash, randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import { Objm } from "@nats-io/obj";
import { copyArtifacts, createAdapter, type ArtifactSource, type ProviderAdapter, type BindingValues } from "@mesh/providers";
import { createOciRegistryAdapter } from "../packages/providers/src/oci-registry.js";
import { ociObjectName } from "../packages/providers/src/artifacts.js";
import { BLOB_CHUNK_BYTES } from "../packages/providers/src/blob-chunks.js";
import { ociRegistrySink } from "../packages/providers/src/registry-artifacts.js";
import { startOwnOciRegistry, type OwnOciRegistry } from "./harness/oci-registry.js";
import { OciHolder, RegistryRefusal, pullThroughout } from "./harness/oci-client.js";
import { startNatsServer, type NatsServer } from "./harness/nats-server.js";
import { startHttpRelay, type HttpRelay } from "./harness/http-relay.js";
import { ErrorCodes, Kinds } from "@mesh/shared";
import { createLogger } from "@mesh/shared/service";
import { expectMeshError, freshGrant } from "./conformance/provider-conformance.js";
import { LogCapture } from "./harness/log-capture.js";
import { waitFor } from "./harness/wait.js";

/** Short, so the test sees a retired generation's last token stop working; the issuer's bound is 60 s. */
const LIFETIME_S = 4;
let registry: OwnOciRegistry;
let adapter: ProviderAdapter;
/** Everything the issuer logs, at debug level. */
const issuerLog = new LogCapture();

beforeAll(async () => {
  registry = await startOwnOciRegistry({ lifetimeSeconds: LIFETIME_S, log: createLogger("oci-token-issuer", { level: "debug", destination: issuerLog }) });
  adapter = createOciRegistryAdapter({
    name: "oci-test",
    node: "node-a",
    endpoint: registry.registryUrl,
    admin: registry.admin,
    options: { issuerUrl: registry.issuerUrl },
  });
}, 60_000);
afterAll(async () => {
  await registry?.stop();
});

const create = (grant: ReturnType<typeof freshGrant>) => adapter.create({ grant, secret: adapter.generate() });
const layerOf = () => randomBytes(2_048);

/** The status a refused call failed with. */
async function refusal(p: Promise<unknown>): Promise<number> {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(e, "expected the registry or issuer to refuse").toBeInstanceOf(RegistryRefusal);
  return (e as RegistryRefusal).status;
}

/** The challenge the registry sends for `scope`, read from an unauthenticated request. */
async function challenge(path: string): Promise<{ realm: string; service: string; scope: string }> {
  const res = await fetch(`${registry.registryUrl}${path}`);
  await res.body?.cancel();
  const h = res.headers.get("www-authenticate") ?? "";
  return Object.fromEntries([...h.matchAll(/([a-z]+)="([^"]*)"/gi)].map((m) => [m[1]!, m[2]!])) as never;
}

describe("oci.registry with the delivered credential", () => {
  it("binds the registry, the namespace and the user, and pushes and pulls an image manifest and blob in the namespace", async () => {
    const grant = freshGrant();
    const { bindings } = await create(grant);
    expect(Object.keys(bindings).sort()).toEqual(["host", "namespace", "password", "port", "provider", "registry", "type", "url", "username"]);
    expect(bindings).toMatchObject({ type: "oci", namespace: grant.module, username: `${grant.module}.res`, url: registry.registryUrl });
    const holder = new OciHolder(bindings);
    const layer = layerOf();
    const ref = { repository: `${bindings.namespace}/app`, tag: "v1" };
    const pushed = await holder.pushImage(ref, layer);
    expect(pushed.manifestDigest).toMatch(/^sha256:[0-9a-f]{64}$/);
    // Another holder of the same grant, starting afresh, pulls what was pushed.
    const pulled = await new OciHolder(bindings).pullImage(ref);
    expect(pulled.manifest.layers[0]!.digest).toBe(pushed.layerDigest);
    expect(pulled.layer.equals(layer)).toBe(true);
    // Deeper paths are inside the namespace too.
    await holder.pushImage({ repository: `${bindings.namespace}/tools/cli`, tag: "1.0" }, layerOf());
    await adapter.delete({ grant });
  });

  it("is refused outside its module's namespace: another module's repositories, a look-alike prefix, the catalog, and delete", async () => {
    const mine = await create(freshGrant());
    const theirs = await create(freshGrant());
    const ref = { repository: `${theirs.bindings.namespace}/app`, tag: "v1" };
    await new OciHolder(theirs.bindings).pushImage(ref, layerOf());
    const me = new OciHolder(mine.bindings);
    // The registry asks for a token with pull (and push) on their repository; the issuer grants none of it.
    expect(await refusal(me.pullImage(ref))).toBe(401);
    expect(await refusal(me.pushImage({ repository: `${theirs.bindings.namespace}/mine`, tag: "x" }, layerOf()))).toBe(401);
    expect(await refusal(me.pushImage({ repository: `${mine.bindings.namespace}x/app`, tag: "x" }, layerOf()))).toBe(401);
    expect(await refusal(me.pushImage({ repository: "library/app", tag: "x" }, layerOf()))).toBe(401);
    // What the token says: exactly the repositories and actions granted, nothing of another namespace.
    const c = await challenge(`/v2/${ref.repository}/manifests/v1`);
    const { token } = await me.token(
      c.realm,
      c.service,
      `repository:${ref.repository}:pull,push repository:${mine.bindings.namespace}/app:pull,push,delete,* registry:catalog:*`,
    );
    const claims = JSON.parse(Buffer.from(token.split(".")[1]!, "base64url").toString()) as { access: unknown; exp: number; iat: number };
    expect(claims.access).toEqual([{ type: "repository", name: `${mine.bindings.namespace}/app`, actions: ["pull", "push"] }]);
    const catalog = await me.request("GET", "/v2/_catalog");
    await catalog.body?.cancel();
    expect(catalog.status).toBe(401);
  });

  it("a retired generation gets no token at once, and the token it had stops working within the token lifetime", async () => {
    const grant = freshGrant(1);
    const g1 = await create(grant);
    const g2 = await create({ ...grant, generation: 2 });
    const ref = { repository: `${grant.module}/app`, tag: "v1" };
    await new OciHolder(g1.bindings).pushImage(ref, layerOf());
    const c = await challenge(`/v2/${ref.repository}/manifests/v1`);
    const old = await new OciHolder(g1.bindings).token(c.realm, c.service, `repository:${ref.repository}:pull`);
    const issuedAt = Date.now();
    await adapter.retire({ grant });
    expect(await refusal(new OciHolder(g1.bindings).token(c.realm, c.service, `repository:${ref.repository}:pull`))).toBe(401);
    expect(await refusal(new OciHolder(g1.bindings).pullImage(ref))).toBe(401);
    expect(await adapter.login({ bindings: g1.bindings })).toMatchObject({ ok: false, reason: "rejected" });
    // The token got before the retire still works for a moment (the registry checks only its signature and times)...
    const manifestWith = (token: string) =>
      new OciHolder(g1.bindings).request("GET", `/v2/${ref.repository}/manifests/v1`, {
        token,
        headers: { accept: "application/vnd.oci.image.manifest.v1+json" },
      });
    const first = await manifestWith(old.token);
    await first.body?.cancel();
    expect(first.status).toBe(200);
    // ...and then no longer: at most the lifetime after it was issued, plus a second of the registry's rounding to whole seconds.
    const status = await waitFor(
      "the retired generation's token to stop working",
      async () => {
        const res = await manifestWith(old.token);
        await res.body?.cancel();
        return res.status === 200 ? undefined : res.status;
      },
      (LIFETIME_S + 2) * 1000 - (Date.now() - issuedAt),
      250,
    );
    expect(status).toBe(401);
    // The next generation goes on.
    await new OciHolder(g2.bindings).pullImage(ref);
    await adapter.delete({ grant });
  }, 30_000);

  it("rotates with a holder pulling throughout: generation 2 staged beside 1, the holder moved, 1 retired, and not one pull fails", async () => {
    const grant = freshGrant(1);
    const g1 = await create(grant);
    const ref = { repository: `${grant.module}/app`, tag: "v1" };
    const layer = layerOf();
    await new OciHolder(g1.bindings).pushImage(ref, layer);
    const holder = new OciHolder(g1.bindings);
    const puller = pullThroughout(holder, ref, layer);
    const generations: BindingValues[] = [g1.bindings];
    for (const generation of [2, 3]) {
      await puller.past(3);
      const next = await create({ ...grant, generation }); // stage k+1 beside k
      await puller.past(3);
      holder.bindings = next.bindings; // the holder applies k+1 (as its agent would deliver it)
      await puller.past(3);
      await adapter.retire({ grant: { ...grant, generation: generation - 1 } }); // every holder confirmed: retire k
      generations.push(next.bindings);
    }
    // Past the token lifetime, so the holder's cached tokens of retired generations are gone too.
    await new Promise((r) => setTimeout(r, (LIFETIME_S + 1) * 1000));
    await puller.past(3);
    await puller.stop();
    expect(puller.failures).toEqual([]);
    expect(puller.pulls).toBeGreaterThan(15);
    expect(await adapter.login({ bindings: generations[0]! })).toMatchObject({ ok: false, reason: "rejected" });
    expect(await adapter.login({ bindings: generations[1]! })).toMatchObject({ ok: false, reason: "rejected" });
    expect(await adapter.login({ bindings: generations[2]! })).toEqual({ ok: true });
    await adapter.delete({ grant });
  }, 60_000);

  it("the issuer's admin API refuses a wrong admin password, and a body that is not a scrypt hash", async () => {
    const wrong = createOciRegistryAdapter({
      name: "oci-test",
      node: "node-a",
      endpoint: registry.registryUrl,
      admin: { username: "mesh-admin", password: "not-the-password" },
      options: { issuerUrl: registry.issuerUrl },
    });
    const e = await expectMeshError(wrong.create({ grant: freshGrant(), secret: wrong.generate() }), ErrorCodes.ProviderMisconfigured);
    expect(e.message).toMatch(/admin.passwordFile/);
    expect(e.message).not.toContain("not-the-password");
    // Only hashes made by the adapter are stored: a plaintext password sent by mistake is refused.
    const res = await fetch(`${registry.issuerUrl}/admin/users/shop.images/generations/1`, {
      method: "PUT",
      headers: { authorization: `Basic ${Buffer.from(`${registry.admin.username}:${registry.admin.password}`).toString("base64")}` },
      body: JSON.stringify({ hash: "not a hash" }),
    });
    expect(res.status).toBe(400);
  });

  it("the issuer logs no password, hash, token or admin password", async () => {
    const grant = freshGrant(1);
    const { bindings } = await create(grant);
    const holder = new OciHolder(bindings, { cacheTokens: false });
    await holder.pushImage({ repository: `${grant.module}/app`, tag: "v1" }, layerOf());
    const c = await challenge(`/v2/${grant.module}/app/manifests/v1`);
    const { token } = await holder.token(c.realm, c.service, `repository:${grant.module}/app:pull`);
    await new OciHolder({ ...bindings, password: "wrong-password-xyz" }).token(c.realm, c.service).catch(() => undefined);
    await adapter.retire({ grant });
    expect(issuerLog.lines.length).toBeGreaterThan(3);
    for (const secret of [bindings.password!, token, token.split(".")[2]!, registry.admin.password, "wrong-password-xyz", "scrypt$"]) {
      expect(issuerLog.text).not.toContain(secret);
    }
    await adapter.delete({ grant });
  });
});

const MiB = 1024 * 1024;

/** `size` bytes that depend on `seed` alone (an AES-CTR key stream), made as they are read, 1 MiB at a time. */
function madeBytes(size: number, seed: Buffer): ReadableStream<Uint8Array> {
  const cipher = createCipheriv("aes-256-ctr", seed, Buffer.alloc(16));
  const zeros = Buffer.alloc(MiB);
  let left = size;
  return new ReadableStream<Uint8Array>(
    {
      pull(c) {
        if (left === 0) return c.close();
        const n = Math.min(MiB, left);
        left -= n;
        c.enqueue(cipher.update(zeros.subarray(0, n)));
      },
    },
    { highWaterMark: 0 },
  );
}

/** The OCI digest of a stream's bytes, read as they come. */
async function digestOf(stream: ReadableStream<Uint8Array>): Promise<string> {
  const hash = createHash("sha256");
  for await (const piece of stream) hash.update(piece);
  return `sha256:${hash.digest("hex")}`;
}

describe("a handover's copy of an image from the bootstrap registry into the registry", () => {
  let nats: NatsServer;
  let nc: NatsConnection;
  let boot: ProviderAdapter;
  let relay: HttpRelay;

  beforeAll(async () => {
    nats = await startNatsServer();
    nc = await connect({ servers: nats.url });
    boot = createAdapter(Kinds.OciRegistry, { name: "boot", node: "node-a", endpoint: nats.url });
    relay = await startHttpRelay(registry.registryUrl);
  });
  afterAll(async () => {
    await boot?.close();
    await nc?.close();
    await relay?.close();
    await nats?.stop();
  });

  /**
   * A bootstrap grant's object store holding one blob of `size` made bytes, put there as a
   * stream: the copy's source, counting what is read of it and how far that ran ahead of what
   * the relay had passed on to the registry; and the blob's digest.
   */
  const bootstrapped = async (size: number) => {
    const grant = freshGrant();
    const { bindings } = await boot.create({ grant, secret: boot.generate() });
    const seed = randomBytes(32);
    const digest = await digestOf(madeBytes(size, seed));
    const os = await new Objm(jetstream(nc)).open(bindings.bucket!);
    await os.put({ name: ociObjectName({ type: "blob", repository: "app", digest }) }, madeBytes(size, seed));
    const inner = await boot.artifactSource!({ grant, bindings });
    const m = { read: 0, opened: 0, ahead: 0 };
    const passed = () => relay.requests.reduce((n, r) => n + r.bytes, 0);
    const took = (n: number) => {
      m.read += n;
      m.ahead = Math.max(m.ahead, m.read - passed());
    };
    const source: ArtifactSource = {
      list: () => inner.list(),
      read: async (a) => {
        const c = await inner.read(a);
        took(c.data.byteLength);
        return c;
      },
      openBlob: async (a) => {
        m.opened++;
        return (await inner.openBlob(a)).pipeThrough(
          new TransformStream<Uint8Array, Uint8Array>({
            transform(piece, c) {
              took(piece.byteLength);
              c.enqueue(piece);
            },
          }),
        );
      },
    };
    return { source, digest, m };
  };

  /** A fresh grant at the registry; its bindings, with the registry reached through the relay. */
  const atRegistry = async () => {
    const grant = freshGrant();
    const { bindings } = await create(grant);
    return { grant, bindings, relayed: { ...bindings, url: relay.url } };
  };

  /** The digest of what the registry holds under `digest`, read back as a stream. */
  const heldDigest = async (bindings: BindingValues, repository: string, digest: string) => {
    const res = await new OciHolder(bindings).request("GET", `/v2/${repository}/blobs/${digest}`);
    expect(res.status).toBe(200);
    return digestOf(res.body!);
  };

  /** The requests of blob uploads the relay passed (the registry's challenges left out): `<method> [<range>] <status or loss>`. */
  const uploads = () =>
    relay.requests
      .filter((r) => r.path.includes("/blobs/uploads/") && r.status !== 401)
      .map((r) => [r.method, r.range, r.lost ? `lost ${r.lost}` : r.status].filter((x) => x !== undefined).join(" "));

  it("streams a 40 MiB blob in chunks of at most 8 MiB, never holding it whole", async () => {
    const size = 40 * MiB + 12_345;
    const { source, digest, m } = await bootstrapped(size);
    const { grant, bindings, relayed } = await atRegistry();
    const sink = await adapter.artifactSink!({ grant, bindings: relayed });
    relay.requests.length = 0;
    expect(await copyArtifacts(source, sink)).toMatchObject({ total: 1, copied: 1, bytes: size });
    // No request carried more than a chunk: the blob went as 6 of them.
    expect(BLOB_CHUNK_BYTES).toBe(8 * MiB);
    expect(Math.max(...relay.requests.map((r) => r.bytes))).toBeLessThanOrEqual(8 * MiB);
    // Tokens live LIFETIME_S here: on a loaded machine one expires during the copy, and the chunk it
    // was refused with (401) goes again with a new token. Counted are the chunks the registry answered.
    const patches = relay.requests.filter((r) => r.method === "PATCH" && r.status !== 401);
    expect(patches.map((r) => r.range)).toEqual([0, 1, 2, 3, 4, 5].map((i) => `${i * 8 * MiB}-${Math.min((i + 1) * 8 * MiB, size) - 1}`));
    // What was read of the source ran ahead of what the registry had taken by a chunk, and the
    // few pieces between the store and the upload, at most.
    expect(m.ahead).toBeLessThanOrEqual(8 * MiB + MiB);
    expect(m.read).toBe(size);
    expect(await heldDigest(bindings, `${grant.module}/app`, digest)).toBe(digest);
    // Copied again, it is found there.
    expect(await copyArtifacts(source, sink)).toMatchObject({ total: 1, copied: 0, present: 1 });
  }, 120_000);

  it("goes on from where the registry stands when a chunk is lost on the way, sending nothing twice", async () => {
    const size = 3 * MiB + MiB / 2;
    const { source, digest, m } = await bootstrapped(size);
    const { grant, bindings, relayed } = await atRegistry();
    const sink = ociRegistrySink(relayed, new URL(registry.issuerUrl).origin, { chunkBytes: MiB });
    relay.requests.length = 0;
    relay.lose("before", (r) => r.method === "PATCH" && r.range === `${2 * MiB}-${3 * MiB - 1}`);
    expect(await copyArtifacts(source, sink)).toMatchObject({ copied: 1, bytes: size });
    expect(uploads()).toEqual([
      "POST 202",
      `PATCH 0-${MiB - 1} 202`,
      `PATCH ${MiB}-${2 * MiB - 1} 202`,
      `PATCH ${2 * MiB}-${3 * MiB - 1} lost before`,
      // Where the upload stands: two chunks held, so the third goes again, and the upload goes on.
      "GET 204",
      `PATCH ${2 * MiB}-${3 * MiB - 1} 202`,
      `PATCH ${3 * MiB}-${size - 1} 202`,
      "PUT 201",
    ]);
    expect(relay.requests.reduce((n, r) => n + r.bytes, 0)).toBe(size);
    expect(m.opened).toBe(1);
    expect(await heldDigest(bindings, `${grant.module}/app`, digest)).toBe(digest);
  }, 60_000);

  it("starts over from a fresh read when the registry dropped the upload after an answer was lost", async () => {
    const size = 2 * MiB + 100;
    const { source, digest, m } = await bootstrapped(size);
    const { grant, bindings, relayed } = await atRegistry();
    const sink = ociRegistrySink(relayed, new URL(registry.issuerUrl).origin, { chunkBytes: MiB });
    relay.requests.length = 0;
    // The registry took the second chunk, but its answer is lost: the upload's URL the copy holds
    // names the state before it, which this registry refuses and drops the upload for.
    relay.lose("after", (r) => r.method === "PATCH" && r.range === `${MiB}-${2 * MiB - 1}`);
    expect(await copyArtifacts(source, sink)).toMatchObject({ copied: 1, bytes: size });
    const seen = uploads();
    expect(seen.slice(0, 4)).toEqual([
      "POST 202",
      `PATCH 0-${MiB - 1} 202`,
      `PATCH ${MiB}-${2 * MiB - 1} lost after`,
      expect.stringMatching(/^GET (400|404)$/),
    ]);
    expect(seen.filter((x) => x.startsWith("POST"))).toEqual(["POST 202", "POST 202"]);
    expect(seen.slice(-4)).toEqual([`PATCH 0-${MiB - 1} 202`, `PATCH ${MiB}-${2 * MiB - 1} 202`, `PATCH ${2 * MiB}-${size - 1} 202`, "PUT 201"]);
    expect(m.opened).toBe(2);
    expect(await heldDigest(bindings, `${grant.module}/app`, digest)).toBe(digest);
  }, 60_000);
});
