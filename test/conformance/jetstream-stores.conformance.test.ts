/**
 * The kv.bucket and object.store adapters against a nats-server of the test's own (Debian's
 * 2.9.10), never the shared one on 4222.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { jetstreamManager, type JetStreamManager, type StreamConfig } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { Objm } from "@nats-io/obj";
import { ErrorCodes, Kinds, SOURCE_OF_RECORD, isMeshError } from "@mesh/shared";
import { openStore } from "@mesh/shared/runtime";
import type { BindingValues, ProviderAdapter, ProviderConfig } from "@mesh/providers";
import {
  createBootstrapNpmRegistryAdapter,
  createBootstrapOciRegistryAdapter,
  createKvBucketAdapter,
  createObjectStoreAdapter,
} from "../../packages/providers/src/jetstream-stores.js";
import { NATS_SERVER_BIN, startNatsServer, type NatsServer } from "../harness/nats-server.js";
import { freePort, waitForPort } from "../harness/ports.js";
import { waitFor } from "../harness/wait.js";
import { atPort, describeProviderConformance, expectMeshError, freshGrant } from "./provider-conformance.js";

let server: NatsServer;
let deadPort: number;
let nc: NatsConnection;
let jsm: JetStreamManager;

beforeAll(async () => {
  server = await startNatsServer();
  deadPort = await freePort();
  nc = await connect({ servers: server.url });
  jsm = await jetstreamManager(nc);
});
afterAll(async () => {
  await nc?.close();
  await server?.stop();
});

const providerOf = (url: string, over: Partial<ProviderConfig> = {}): ProviderConfig => ({ name: "nats-test", node: "node-a", endpoint: url, ...over });
const deadEndpoint = () => `nats://127.0.0.1:${deadPort}`;
/** The bucket of a grant of freshGrant(): hyphens doubled in the module, as the SQL backends do. */
const bucketOf = (grant: { module: string; requirement: string }) => `${grant.module.replaceAll("-", "__")}_${grant.requirement}`;
/** The bindings a grant's bucket gets on the test's server: where it is, and no credential. */
const bindingsOf = (type: string, bucket: string): BindingValues => ({
  type,
  provider: "nats-test",
  host: "127.0.0.1",
  port: String(server.port),
  uri: `nats://127.0.0.1:${server.port}`,
  bucket,
});
/** The stream's config, or undefined when it is gone. */
const streamConfig = (stream: string): Promise<StreamConfig | undefined> =>
  jsm.streams.info(stream).then(
    (si) => si.config,
    () => undefined,
  );

for (const [kind, factory] of [
  [Kinds.KvBucket, createKvBucketAdapter],
  [Kinds.ObjectStore, createObjectStoreAdapter],
  // The bootstrap registries: an object store each, on the mesh's own NATS.
  [Kinds.OciRegistry, createBootstrapOciRegistryAdapter],
  [Kinds.NpmRegistry, createBootstrapNpmRegistryAdapter],
] as const) {
  describeProviderConformance(kind, () => factory(providerOf(server.url)), {
    stateful: true,
    credential: false,
    unreachable: {
      makeAdapter: () => factory(providerOf(deadEndpoint())),
      bindings: (b) => atPort(b, deadPort),
    },
  });
}

/** Opens the binding's KV bucket as a holder would: the uri, and nothing else of the mesh's. */
async function holderKv<T>(bindings: BindingValues, fn: (kv: Awaited<ReturnType<Kvm["open"]>>) => Promise<T>): Promise<T> {
  const holder = await connect({ servers: bindings.uri! });
  try {
    return await fn(await new Kvm(holder).open(bindings.bucket!));
  } finally {
    await holder.close();
  }
}

describe("kv.bucket adapter", () => {
  let adapter: ProviderAdapter;
  beforeAll(() => {
    adapter = createKvBucketAdapter(providerOf(server.url));
  });
  afterAll(async () => {
    await adapter?.close();
  });

  it("binds what a holder needs, no credential, and marks the stream with the grant (2.9.10 keeps the description)", async () => {
    const grant = freshGrant();
    const bucket = bucketOf(grant);
    const { resource, bindings } = await adapter.create({ grant, secret: {} });
    expect(resource).toEqual({ bucket, stream: `KV_${bucket}` });
    expect(bindings).toEqual(bindingsOf("nats-kv", bucket));
    const config = await streamConfig(`KV_${bucket}`);
    expect(config).toMatchObject({ description: `mesh grant ${grant.module}/res`, max_msgs_per_subject: 1, max_age: 0, max_bytes: -1, num_replicas: 1 });
    await adapter.delete({ grant });
  });

  it("a value put through the binding's bucket survives a second create and a new generation", async () => {
    const grant = freshGrant();
    const { bindings } = await adapter.create({ grant, secret: {}, options: { history: 3 } });
    await holderKv(bindings, (kv) => kv.put("order.1", "tea"));
    await adapter.create({ grant, secret: {}, options: { history: 3 } });
    await adapter.create({ grant: { ...grant, generation: 2 }, secret: {}, options: { history: 3 } });
    expect(await holderKv(bindings, async (kv) => (await kv.get("order.1"))?.string())).toBe("tea");
    await adapter.delete({ grant });
  });

  it("create applies changed options to the existing bucket, and a removed option returns to its default", async () => {
    const grant = freshGrant();
    const stream = `KV_${bucketOf(grant)}`;
    const { bindings } = await adapter.create({ grant, secret: {}, options: { history: 5, maxBytes: 1_048_576 } });
    expect(await streamConfig(stream)).toMatchObject({ max_msgs_per_subject: 5, max_age: 0, max_bytes: 1_048_576 });
    await holderKv(bindings, (kv) => kv.put("k", "v1"));

    // History and ttl can be changed on an existing bucket on 2.9.10; a ttl below the default
    // 2-minute de-duplication window shortens the window too, else the server refuses it.
    await adapter.create({ grant, secret: {}, options: { history: 10, ttl: "30s", maxBytes: "2097152" } });
    expect(await streamConfig(stream)).toMatchObject({ max_msgs_per_subject: 10, max_age: 30e9, duplicate_window: 30e9, max_bytes: 2_097_152 });
    await holderKv(bindings, (kv) => kv.put("k", "v2"));
    expect(await holderKv(bindings, async (kv) => (await kv.get("k"))?.string())).toBe("v2");

    await adapter.create({ grant, secret: {} });
    expect(await streamConfig(stream)).toMatchObject({ max_msgs_per_subject: 1, max_age: 0, max_bytes: -1, description: `mesh grant ${grant.module}/res` });
    expect(await holderKv(bindings, async (kv) => (await kv.get("k"))?.string())).toBe("v2");
    await adapter.delete({ grant });
  });

  it("two provisioners creating at once with different options both succeed; the next create converges", async () => {
    const grant = freshGrant();
    const other = createKvBucketAdapter(providerOf(server.url));
    try {
      await Promise.all([adapter.create({ grant, secret: {}, options: { history: 2 } }), other.create({ grant, secret: {}, options: { history: 3 } })]);
      await adapter.create({ grant, secret: {}, options: { history: 4 } });
      expect(await streamConfig(`KV_${bucketOf(grant)}`)).toMatchObject({ max_msgs_per_subject: 4 });
    } finally {
      await other.close();
    }
    await adapter.delete({ grant });
  });

  it("refuses invalid options as InvalidRequest naming the option, and creates nothing", async () => {
    const grant = freshGrant();
    for (const [options, option] of [
      [{ history: 0 }, "history"],
      [{ history: 65 }, "history"],
      [{ history: 2.5 }, "history"],
      [{ ttl: "soon" }, "ttl"],
      [{ ttl: 30 }, "ttl"],
      [{ ttl: "50ms" }, "ttl"], // nats-server refuses a max_age below 100 ms
      [{ maxBytes: -5 }, "maxBytes"],
      [{ maxBytes: "1MB" }, "maxBytes"],
      [{ replicas: 6 }, "replicas"],
      [{ colour: "red" }, "colour"],
      // A single server cannot keep 3 copies (nats-server 2.9.10 would take it in an update).
      [{ replicas: 3 }, "replicas"],
    ] as const) {
      const e = await expectMeshError(adapter.create({ grant, secret: {}, options }), ErrorCodes.InvalidRequest);
      expect(e.message).toContain(`option ${option} of kv.bucket ${grant.module}/res`);
    }
    expect(await streamConfig(`KV_${bucketOf(grant)}`)).toBeUndefined();
  });

  it("never takes over a bucket of its name that the mesh did not make, marked otherwise or not at all", async () => {
    for (const description of [undefined, "someone else's"]) {
      const grant = freshGrant();
      const bucket = bucketOf(grant);
      const theirs = await new Kvm(nc).create(bucket, { history: 2, ...(description ? { description } : {}) });
      await theirs.put("mine", "theirs");
      const e = await expectMeshError(adapter.create({ grant, secret: {}, options: { history: 7 } }), ErrorCodes.Conflict);
      expect(e.message).toContain(bucket);
      expect(e.message).toMatch(/delete or rename/);
      const seen = await adapter.observe({ grant });
      expect(seen.exists).toBe(false);
      expect(seen.details.conflict).toContain(bucket);
      await adapter.delete({ grant }); // leaves what is not the mesh's alone
      expect(await streamConfig(`KV_${bucket}`)).toMatchObject({ max_msgs_per_subject: 2 });
      expect((await theirs.get("mine"))?.string()).toBe("theirs");
      await theirs.destroy();
    }
  });

  it("delete removes the stream; login then says missing", async () => {
    const grant = freshGrant();
    const { bindings } = await adapter.create({ grant, secret: {} });
    await adapter.delete({ grant });
    expect(await streamConfig(`KV_${bucketOf(grant)}`)).toBeUndefined();
    expect(await adapter.login({ bindings })).toMatchObject({ ok: false, reason: "missing" });
  });

  it("login refuses a binding without a bucket or with one that is no bucket name, before any request", async () => {
    const { bindings } = await adapter.create({ grant: freshGrant(), secret: {} });
    const { bucket: _, ...noBucket } = bindings;
    expect(await adapter.login({ bindings: noBucket })).toMatchObject({ ok: false, reason: "rejected" });
    expect(await adapter.login({ bindings: { ...bindings, bucket: "a.>" } })).toMatchObject({ ok: false, reason: "rejected" });
  });

  it("keeps one connection, named, and close() drains it", async () => {
    const own = createKvBucketAdapter(providerOf(server.url));
    /** The ids of the server's connections named as the adapter names its own. */
    const named = async () => {
      const res = await fetch(`http://127.0.0.1:${server.monitorPort}/connz`);
      const { connections } = (await res.json()) as { connections: Array<{ cid: number; name?: string }> };
      return new Set(connections.filter((c) => c.name === "mesh jetstream-stores adapter").map((c) => c.cid));
    };
    const before = await named();
    const grant = freshGrant();
    await own.create({ grant, secret: {} });
    await own.observe({ grant });
    await own.login({ bindings: (await own.create({ grant, secret: {} })).bindings });
    const added = [...(await named())].filter((cid) => !before.has(cid));
    expect(added).toHaveLength(1);
    await own.delete({ grant });
    await own.close();
    // The server forgets a closed connection a moment after the client is done.
    await waitFor("the adapter's connection to be gone", async () => !(await named()).has(added[0]!));
  });

  it("refuses an endpoint that is not nats://, or that carries a password, without quoting the password", () => {
    for (const endpoint of ["postgres://127.0.0.1:5432", "not a url", "nats://admin:hunter2@127.0.0.1:4222"]) {
      try {
        createKvBucketAdapter(providerOf(endpoint));
        expect.unreachable(`endpoint ${endpoint} was accepted`);
      } catch (e) {
        expect(isMeshError(e, ErrorCodes.ProviderMisconfigured), String(e)).toBe(true);
        expect((e as Error).message).not.toContain("hunter2");
      }
    }
  });
});

describe("object.store adapter", () => {
  let adapter: ProviderAdapter;
  beforeAll(() => {
    adapter = createObjectStoreAdapter(providerOf(server.url));
  });
  afterAll(async () => {
    await adapter?.close();
  });

  it("binds the store, an object put through it survives a second create, and options are applied", async () => {
    const grant = freshGrant();
    const bucket = bucketOf(grant);
    const { resource, bindings } = await adapter.create({ grant, secret: {}, options: { ttl: "1h" } });
    expect(resource).toEqual({ bucket, stream: `OBJ_${bucket}` });
    expect(bindings).toEqual(bindingsOf("nats-object-store", bucket));
    expect(await streamConfig(`OBJ_${bucket}`)).toMatchObject({ description: `mesh grant ${grant.module}/res`, max_age: 3_600e9, max_bytes: -1 });
    const holder = await connect({ servers: bindings.uri! });
    try {
      const store = await new Objm(holder).open(bindings.bucket!);
      await store.putBlob({ name: "invoice.pdf" }, new TextEncoder().encode("%PDF"));
      await adapter.create({ grant, secret: {}, options: { maxBytes: 1_048_576 } });
      expect(await streamConfig(`OBJ_${bucket}`)).toMatchObject({ max_age: 0, max_bytes: 1_048_576 });
      expect(new TextDecoder().decode((await store.getBlob("invoice.pdf"))!)).toBe("%PDF");
    } finally {
      await holder.close();
    }
    await adapter.delete({ grant });
    expect(await streamConfig(`OBJ_${bucket}`)).toBeUndefined();
  });

  it("refuses the KV-only option history, and never takes over a store it did not make", async () => {
    const grant = freshGrant();
    const e = await expectMeshError(adapter.create({ grant, secret: {}, options: { history: 2 } }), ErrorCodes.InvalidRequest);
    expect(e.message).toMatch(/option history of object\.store .* is unknown; object\.store takes ttl, maxBytes, replicas/);
    const theirs = await new Objm(nc).create(bucketOf(grant));
    await expectMeshError(adapter.create({ grant, secret: {} }), ErrorCodes.Conflict);
    await adapter.delete({ grant });
    expect(await streamConfig(`OBJ_${bucketOf(grant)}`)).toBeDefined();
    await theirs.destroy();
  });
});

describe("a NATS server that stops", () => {
  let own: NatsServer;
  beforeAll(async () => {
    own = await startNatsServer();
  });
  afterAll(async () => {
    await own?.stop();
  });

  it("is unreachable while down, naming the endpoint; once back, the same adapter works again", async () => {
    const adapter = createKvBucketAdapter(providerOf(own.url));
    try {
      const grant = freshGrant();
      const { bindings } = await adapter.create({ grant, secret: {} });
      await own.stop({ keepStore: true });
      expect(await adapter.login({ bindings })).toMatchObject({ ok: false, reason: "unreachable" });
      const e = await expectMeshError(adapter.observe({ grant }), ErrorCodes.ProviderUnreachable);
      expect(e.message).toContain(own.url);
      expect(e.message).toMatch(/unreachable.*check/);
      expect(isMeshError(e) && e.retryable).toBe(true);
      await own.restart();
      expect(await adapter.login({ bindings })).toEqual({ ok: true });
      expect((await adapter.observe({ grant })).exists).toBe(true);
      await adapter.delete({ grant });
    } finally {
      await adapter.close();
    }
  });
});

describe("a NATS server with authentication", () => {
  const admin = { username: "mesh-admin", password: "s3cret-admin-pass" };
  let url: string;
  let stop: () => Promise<void>;
  beforeAll(async () => {
    // The harness starts servers without auth; this one needs --user/--pass.
    const port = await freePort();
    const storeDir = mkdtempSync(join(tmpdir(), "mesh-nats-auth-"));
    const proc = spawn(NATS_SERVER_BIN, ["-a", "127.0.0.1", "-p", String(port), "-js", "-sd", storeDir, "--user", admin.username, "--pass", admin.password], {
      stdio: "ignore",
    });
    stop = async () => {
      if (proc.exitCode === null && proc.signalCode === null) await new Promise((r) => (proc.once("exit", r), proc.kill("SIGTERM")));
      rmSync(storeDir, { recursive: true, force: true });
    };
    await waitForPort(port);
    url = `nats://127.0.0.1:${port}`;
  });
  afterAll(async () => {
    await stop?.();
  });

  it("works with the admin user; an agent's adapter without one still finds the server answering", async () => {
    const adapter = createKvBucketAdapter(providerOf(url, { admin }));
    const agent = createKvBucketAdapter(providerOf(url));
    try {
      const grant = freshGrant();
      const { bindings } = await adapter.create({ grant, secret: {} });
      expect(await adapter.login({ bindings })).toEqual({ ok: true });
      expect(await agent.login({ bindings })).toEqual({ ok: true });
      await expectMeshError(agent.observe({ grant }), ErrorCodes.ProviderMisconfigured);
      await adapter.delete({ grant });
      expect(await adapter.login({ bindings })).toMatchObject({ ok: false, reason: "missing" });
    } finally {
      await adapter.close();
      await agent.close();
    }
  });

  it("a wrong admin password is ProviderMisconfigured, naming the user and where the password comes from", async () => {
    const wrong = createKvBucketAdapter(providerOf(url, { admin: { username: admin.username, password: "not-the-password" } }));
    try {
      const e = await expectMeshError(wrong.observe({ grant: freshGrant() }), ErrorCodes.ProviderMisconfigured);
      expect(e.message).toContain(`"${admin.username}"`);
      expect(e.message).toMatch(/passwordEnv|passwordFile/);
      expect(e.message).not.toContain("not-the-password");
      expect(isMeshError(e) && e.retryable).toBe(false);
    } finally {
      await wrong.close();
    }
  });
});

describe("the bootstrap registries and the source of record", () => {
  it("binds an image or package store as an object store, with the keys of object.store and its format", async () => {
    for (const [factory, format] of [
      [createBootstrapOciRegistryAdapter, "oci"],
      [createBootstrapNpmRegistryAdapter, "npm"],
    ] as const) {
      const adapter = factory(providerOf(server.url));
      try {
        const grant = freshGrant();
        const bucket = bucketOf(grant);
        const { bindings } = await adapter.create({ grant, secret: {} });
        expect(bindings).toEqual({ ...bindingsOf("nats-object-store", bucket), format });
        expect((await streamConfig(`OBJ_${bucket}`))?.description).toBe(`mesh grant ${grant.module}/res`);
        expect(await adapter.login({ bindings })).toEqual({ ok: true });
        // Images and packages are kept until deleted: no ttl option.
        expect((await expectMeshError(adapter.create({ grant, secret: {}, options: { ttl: "1d" } }), ErrorCodes.InvalidRequest)).message).toMatch(
          /option ttl .* is unknown/,
        );
        await adapter.delete({ grant });
      } finally {
        await adapter.close();
      }
    }
  });

  it("binds grant mesh/records to the mesh's own buckets and streams, makes nothing, deletes nothing, and says which is missing", async () => {
    const own = await startNatsServer();
    const nc = await connect({ servers: own.url });
    const adapter = createKvBucketAdapter(providerOf(own.url));
    const grant = { module: "mesh", requirement: "records", generation: 1 };
    try {
      expect((await expectMeshError(adapter.create({ grant, secret: {} }), ErrorCodes.ProviderRejected)).message).toMatch(
        /the source of record lacks bucket mesh-manifests, .*meshctl bootstrap/,
      );
      expect(await (await jetstreamManager(nc)).streams.names().next()).toEqual([]);
      await openStore(nc);
      const { resource, bindings } = await adapter.create({ grant, secret: {} });
      expect(resource).toEqual({ buckets: SOURCE_OF_RECORD.buckets.join(","), streams: SOURCE_OF_RECORD.streams.join(",") });
      expect(bindings).toMatchObject({ type: "nats-kv", provider: "nats-test", uri: own.url, ...resource });
      expect(await adapter.observe({ grant })).toMatchObject({ exists: true });
      expect(await adapter.login({ bindings })).toEqual({ ok: true });
      await adapter.delete({ grant });
      const jsm = await jetstreamManager(nc);
      expect((await jsm.streams.info("KV_mesh-grants")).config.name).toBe("KV_mesh-grants");
      await jsm.streams.delete("KV_mesh-holders");
      expect(await adapter.observe({ grant })).toEqual({ exists: false, details: { missing: "bucket mesh-holders" } });
      expect(await adapter.login({ bindings })).toMatchObject({ ok: false, reason: "missing", message: expect.stringMatching(/lacks bucket mesh-holders/) });
      expect(await adapter.login({ bindings: { ...bindings, buckets: "mesh-grants" } })).toMatchObject({ ok: false, reason: "rejected" });
    } finally {
      await adapter.close();
      await nc.close();
      await own.stop();
    }
  });
});
