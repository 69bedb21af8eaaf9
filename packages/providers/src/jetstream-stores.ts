/**
 * The adapters of kinds `kv.bucket` and `object.store`: a JetStream KV bucket or object store
 * on a NATS server, made through the provider's admin connection. They need nothing but NATS.
 *
 * Layout per grant: bucket `<module>_<requirement>` (see jetstream-store-layout.ts), made by
 * the client library that uses it (@nats-io/kv, @nats-io/obj), so its stream is what that
 * client expects. The stream's description `mesh grant <module>/<requirement>` marks it as the
 * mesh's: a bucket of that name without the mark is a Conflict, never converged or deleted.
 * Create converges the stream's limits (history, ttl, maxBytes, replicas) to the options.
 *
 * No credential, so no overlap: a bucket has no identity of its own, a holder reaches it with
 * its own `nats.user` grant. generate() makes nothing, every generation binds the same bucket,
 * and retire has nothing to end.
 *
 * One connection per adapter, opened on first use, without reconnects: a server that went away
 * closes it, and the next call connects afresh and fails at once as ProviderUnreachable rather
 * than after a request timeout.
 */
import { natsAuth } from "./nats-auth.js";
import {
  AuthorizationError,
  ClosedConnectionError,
  ConnectionError,
  DrainingConnectionError,
  NoRespondersError,
  PermissionViolationError,
  ProtocolError,
  RequestError,
  TimeoutError,
  connect,
  type NatsConnection,
} from "@nats-io/transport-node";
import { JetStreamApiError, StorageType, jetstreamManager, type JetStreamClient, type JetStreamManager, type StreamInfo } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { Objm } from "@nats-io/obj";
import { objectStoreArtifacts } from "./bootstrap-registry.js";
import { ErrorCodes, Kinds, MeshError, RECORDS_GRANT, SOURCE_OF_RECORD, errorMessage, grantId } from "@mesh/shared";
import { retryJetStreamGap } from "@mesh/shared/runtime";
import type {
  AdapterFactory,
  ArtifactRequest,
  ArtifactSink,
  ArtifactSource,
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
  SecretMaterial,
} from "./adapter.js";
import { checkGrantRef } from "./grant-ref.js";
import { bindingServers, hostPort, parseNatsEndpoints, type NatsEndpoints } from "./endpoint.js";
import { NATS_BUCKET_NAME, bucketName, limitsUpdate, markerOf, storeLimits, streamName, type StoreKind, type StoreLimits } from "./jetstream-store-layout.js";

/** How long connecting, and each JetStream API request, may take. */
const ADMIN_TIMEOUT_MS = 5_000;
/** How long a login's connection to an address other than the provider's endpoint may take. */
const LOGIN_TIMEOUT_MS = 3_000;

/** Makes the `kv.bucket` adapter of `provider`; throws `ProviderMisconfigured` for a bad endpoint. */
export const createKvBucketAdapter: AdapterFactory = (provider) => new JetStreamStoreAdapter(Kinds.KvBucket, provider);

/** Makes the `object.store` adapter of `provider`; throws `ProviderMisconfigured` for a bad endpoint. */
export const createObjectStoreAdapter: AdapterFactory = (provider) => new JetStreamStoreAdapter(Kinds.ObjectStore, provider);

/**
 * The bootstrap registries: `oci.registry` and `npm.registry` on a NATS provider (the mesh's own,
 * before any registry is installed), each an object store of the grant, bound with the keys of
 * `object.store` plus `format` (`oci`, `npm`): what a holder reads images or packages from until
 * the grant is handed over to a registry server.
 */
export const createBootstrapOciRegistryAdapter: AdapterFactory = (provider) => new JetStreamStoreAdapter(Kinds.OciRegistry, provider);
export const createBootstrapNpmRegistryAdapter: AdapterFactory = (provider) => new JetStreamStoreAdapter(Kinds.NpmRegistry, provider);

/** What differs between the two kinds. */
interface Flavour {
  what: string;
  /**
   * The binding's `type`: it names the client API a holder needs. Plain `nats` is what a
   * `nats.user` binding says (a connection); this one says which JetStream API to open.
   */
  bindingType: string;
  /** Binding values beside the common ones. */
  extra?: Record<string, string>;
  /** Makes the bucket as its client library would, marked with `description`. */
  make(js: JetStreamClient, bucket: string, description: string, limits: StoreLimits): Promise<unknown>;
}

/** An object store, as @nats-io/obj makes one (its ttl in nanoseconds, the KV's in milliseconds). */
const makeObjectStore: Flavour["make"] = (js, bucket, description, l) =>
  new Objm(js).create(bucket, { description, ttl: l.ttlMs * 1_000_000, max_bytes: l.maxBytes, replicas: l.replicas, storage: StorageType.File });

const FLAVOURS: Record<StoreKind, Flavour> = {
  [Kinds.KvBucket]: {
    what: "KV bucket",
    bindingType: "nats-kv",
    make: (js, bucket, description, l) =>
      new Kvm(js).create(bucket, { description, history: l.history, ttl: l.ttlMs, max_bytes: l.maxBytes, replicas: l.replicas, storage: StorageType.File }),
  },
  [Kinds.ObjectStore]: {
    what: "object store",
    bindingType: "nats-object-store",
    make: makeObjectStore,
  },
  [Kinds.OciRegistry]: { what: "image store (the bootstrap registry)", bindingType: "nats-object-store", extra: { format: "oci" }, make: makeObjectStore },
  [Kinds.NpmRegistry]: { what: "package store (the bootstrap registry)", bindingType: "nats-object-store", extra: { format: "npm" }, make: makeObjectStore },
};

interface Endpoint {
  host: string;
  port: number;
}

interface JetStreamConnection {
  nc: NatsConnection;
  js: JetStreamClient;
  jsm: JetStreamManager;
}

/** The names of one grant's bucket. */
interface StoreNames {
  grant: string;
  bucket: string;
  stream: string;
  marker: string;
}

class JetStreamStoreAdapter implements ProviderAdapter {
  readonly kinds: readonly StoreKind[];
  private readonly flavour: Flavour;
  private readonly endpoint: Endpoint;
  /** Every server of the endpoint (a cluster's, when it lists several). */
  private readonly at: NatsEndpoints;
  private admin: Promise<JetStreamConnection> | undefined;

  constructor(
    private readonly kind: StoreKind,
    private readonly provider: ProviderConfig,
  ) {
    this.kinds = [kind];
    this.flavour = FLAVOURS[kind];
    this.at = parseNatsEndpoints(provider);
    this.endpoint = this.at.first;
  }

  /** Nothing: the bucket has no credential of its own. */
  generate(): SecretMaterial {
    return {};
  }

  /** Whether the grant's bucket exists and is the mesh's; the generation does not matter. */
  async observe(req: ObserveRequest): Promise<ObserveResult> {
    if (this.isRecords(req.grant)) {
      const missing = await this.withAdmin(`observe ${RECORDS_GRANT}`, ({ jsm }) => missingOfRecord(jsm));
      return missing.length ? { exists: false, details: { missing: missing.join(",") } } : { exists: true, details: recordNames() };
    }
    const names = this.names(req.grant);
    return this.withAdmin(`observe ${names.grant}`, async ({ jsm }): Promise<ObserveResult> => {
      const info = await streamInfo(jsm, names.stream);
      if (!info) return { exists: false, details: {} };
      if (info.config.description !== names.marker) return { exists: false, details: { conflict: this.conflict(names, info).message } };
      return { exists: true, details: { bucket: names.bucket, stream: names.stream } };
    });
  }

  async create(req: CreateRequest): Promise<CreateResult> {
    if (this.isRecords(req.grant)) return this.bindRecords();
    const names = this.names(req.grant);
    const limits = storeLimits(this.kind, req.options, names.grant);
    await this.withAdmin(`create ${names.grant}`, async ({ nc, js, jsm }) => {
      // A single server takes replicas > 1 in a stream update and keeps it (seen on 2.9.10);
      // refuse it here rather than leave a setting that is not true.
      if (limits.replicas > 1 && !nc.info?.cluster) {
        throw new MeshError(
          ErrorCodes.InvalidRequest,
          `option replicas of ${this.kind} ${names.grant} is ${limits.replicas}, but the NATS server at ${this.provider.endpoint} is not part of a cluster; set replicas: 1 or use a clustered provider`,
        );
      }
      let info = await streamInfo(jsm, names.stream);
      if (!info) {
        await this.flavour.make(js, names.bucket, names.marker, limits).catch((e: unknown) => {
          // Another creator was first with other limits ("stream name already in use"): converge it below.
          if (!(e instanceof JetStreamApiError && e.code === STREAM_NAME_IN_USE)) throw e;
        });
        info = await jsm.streams.info(names.stream); // ours, or whoever's was first
      }
      if (info.config.description !== names.marker) throw this.conflict(names, info);
      const update = limitsUpdate(info.config, limits);
      if (update) await jsm.streams.update(names.stream, update);
    });
    const { host, port } = this.endpoint;
    return {
      resource: { bucket: names.bucket, stream: names.stream },
      bindings: {
        type: this.flavour.bindingType,
        provider: this.provider.name,
        host,
        port: String(port),
        // No credential: a holder connects with its own nats.user identity.
        uri: this.at.url,
        bucket: names.bucket,
        ...this.flavour.extra,
      },
    };
  }

  /** Deletes the grant's stream if it carries the grant's mark; anything else of that name is left alone. */
  async delete(req: DeleteRequest): Promise<void> {
    // The mesh's own store is never dropped through a grant: taking mesh/records back leaves it.
    if (this.isRecords(req.grant)) return;
    const names = this.names(req.grant);
    await this.withAdmin(`delete ${names.grant}`, async ({ jsm }) => {
      const info = await streamInfo(jsm, names.stream);
      if (info?.config.description !== names.marker) return;
      await jsm.streams.delete(names.stream).catch((e: unknown) => {
        if (!isStreamNotFound(e)) throw e;
      });
    });
  }

  /** Nothing to end: no generation has an identity of its own. Validates the grant only. */
  async retire(req: RetireRequest): Promise<void> {
    checkGrantRef(req.grant);
  }

  /**
   * Checks that the binding's bucket exists at the address it names: through the adapter's own
   * connection when that is the provider's endpoint, otherwise through a connection of its own
   * without any identity (the admin password never goes to an address read from a binding).
   */
  async login(req: LoginRequest): Promise<LoginResult> {
    const b = req.bindings;
    // The source of record's binding names its buckets, not one bucket.
    if (this.kind === Kinds.KvBucket && b.buckets !== undefined) {
      if (b.buckets !== recordNames().buckets || b.streams !== recordNames().streams)
        return {
          ok: false,
          reason: "rejected",
          message: `the binding names ${b.buckets} and ${b.streams ?? "no streams"}, not the source of record of this version`,
        };
      try {
        const missing = await missingOfRecord((await this.adminConnection()).jsm);
        return missing.length
          ? { ok: false, reason: "missing", message: `the source of record lacks ${missing.join(", ")} at ${this.provider.endpoint}` }
          : { ok: true };
      } catch (e) {
        // Without an identity of its own (an agent's adapter) the check ends at "the server answers", as for any bucket.
        if (isAuthError(e))
          return this.provider.admin
            ? { ok: false, reason: "rejected", message: `NATS at ${this.provider.endpoint} rejected the admin user: ${errorMessage(e)}` }
            : { ok: true };
        if (e instanceof PermissionViolationError) return { ok: false, reason: "rejected", message: `NATS at ${this.provider.endpoint}: ${errorMessage(e)}` };
        return { ok: false, reason: "unreachable", message: `cannot check the source of record at ${this.provider.endpoint}: ${errorMessage(e)}` };
      }
    }
    const lacking = ["host", "port", "bucket"].filter((k) => !b[k]);
    if (lacking.length > 0) return { ok: false, reason: "rejected", message: `the binding lacks ${lacking.join(", ")}` };
    const port = Number(b.port);
    if (!NATS_BUCKET_NAME.test(b.bucket!) || !Number.isInteger(port) || port < 1 || port > 65_535) {
      return { ok: false, reason: "rejected", message: `the binding's bucket ${JSON.stringify(b.bucket)} or port ${JSON.stringify(b.port)} is not valid` };
    }
    const where = hostPort(b.host!, port);
    const stream = streamName(this.kind, b.bucket!);
    const own = b.host === this.endpoint.host && port === this.endpoint.port;
    try {
      let info: StreamInfo | undefined;
      if (own) {
        info = await streamInfo((await this.adminConnection()).jsm, stream);
      } else {
        const c = await openJetStream(bindingServers(b), LOGIN_TIMEOUT_MS, undefined, this.at.tls);
        try {
          info = await streamInfo(c.jsm, stream);
        } finally {
          await c.nc.close().catch(() => {});
        }
      }
      return info ? { ok: true } : { ok: false, reason: "missing", message: `${this.flavour.what} ${b.bucket} does not exist at ${where}` };
    } catch (e) {
      const why = errorMessage(e);
      if (isAuthError(e)) {
        // Without an identity of its own (an agent's adapter, or a foreign address) the check
        // ends at "the server answers": the binding holds no credential that could be wrong.
        if (!own || !this.provider.admin) return { ok: true };
        return { ok: false, reason: "rejected", message: `NATS at ${where} rejected the admin user ${JSON.stringify(this.provider.admin.username)}: ${why}` };
      }
      if (e instanceof PermissionViolationError) return { ok: false, reason: "rejected", message: `NATS at ${where}: ${why}` };
      return { ok: false, reason: "unreachable", message: `cannot check ${this.flavour.what} ${b.bucket} at ${where}: ${why}` };
    }
  }

  /** The bootstrap registry's images or packages of the grant (its object store), through the admin connection. */
  async artifactSource(req: ArtifactRequest): Promise<ArtifactSource> {
    return this.artifacts(req);
  }

  async artifactSink(req: ArtifactRequest): Promise<ArtifactSink> {
    return this.artifacts(req);
  }

  private async artifacts(req: ArtifactRequest): Promise<ArtifactSource & ArtifactSink> {
    const kind = this.kind;
    if (kind !== Kinds.OciRegistry && kind !== Kinds.NpmRegistry) {
      throw new MeshError(ErrorCodes.InvalidRequest, `a ${this.flavour.what} holds no images or packages to carry over`);
    }
    const names = this.names(req.grant);
    const { js, os } = await this.withAdmin(`open ${this.flavour.what} ${names.bucket}`, async ({ js }) => ({ js, os: await new Objm(js).open(names.bucket) }));
    const where = `${this.flavour.what} ${names.bucket} at ${this.provider.endpoint}`;
    const store = objectStoreArtifacts(js, os, kind, where);
    // Every call through the admin's retries and error mapping, as the adapter's other verbs; a
    // blob's stream says its own failures, and a blob written again reads it again from the start.
    return {
      list: () => this.withAdmin(`list ${where}`, () => store.list()),
      read: (a) => this.withAdmin(`read ${where}`, () => store.read(a)),
      openBlob: (a) => this.withAdmin(`read ${where}`, () => store.openBlob(a)),
      has: (a) => this.withAdmin(`look in ${where}`, () => store.has(a)),
      write: (a, c) => this.withAdmin(`write to ${where}`, () => store.write(a, c)),
      writeBlob: (a, open) => this.withAdmin(`write to ${where}`, () => store.writeBlob(a, open)),
    };
  }

  async close(): Promise<void> {
    const admin = this.admin;
    this.admin = undefined;
    const c = await admin?.catch(() => undefined);
    if (c && !c.nc.isClosed()) await c.nc.drain().catch(() => {});
  }

  /** True for grant `mesh/records` of kind `kv.bucket`: the source of record, which is bound, never made (see {@link bindRecords}). */
  private isRecords(grant: { module: string; requirement: string }): boolean {
    return this.kind === Kinds.KvBucket && grantId(grant.module, grant.requirement) === RECORDS_GRANT;
  }

  /**
   * Grant `mesh/records`: the buckets and streams the services keep their state in, made by the
   * operator's admin before the services moved onto their identities (every service opens the
   * store at start); the grant binds them by name, and fails, retryably, saying what is missing.
   */
  private async bindRecords(): Promise<CreateResult> {
    const missing = await this.withAdmin(`bind ${RECORDS_GRANT}`, ({ jsm }) => missingOfRecord(jsm));
    if (missing.length) {
      throw new MeshError(
        ErrorCodes.ProviderRejected,
        `the source of record lacks ${missing.join(", ")} at ${this.provider.endpoint}; every service makes what is missing when it starts as the operator's admin (meshctl bootstrap), so start one that way`,
        { retryable: true },
      );
    }
    const { host, port } = this.endpoint;
    const names = recordNames();
    return {
      resource: names,
      bindings: {
        type: this.flavour.bindingType,
        provider: this.provider.name,
        host,
        port: String(port),
        uri: `${this.at.url.split(":")[0]}://${hostPort(host, port)}`,
        ...names,
      },
    };
  }

  private names(grant: CreateRequest["grant"] | DeleteRequest["grant"]): StoreNames {
    checkGrantRef(grant);
    const bucket = bucketName(grant.module, grant.requirement);
    return { grant: `${grant.module}/${grant.requirement}`, bucket, stream: streamName(this.kind, bucket), marker: markerOf(grant.module, grant.requirement) };
  }

  private conflict(names: StoreNames, info: StreamInfo): MeshError {
    const what = `NATS ${this.flavour.what}`;
    return new MeshError(
      ErrorCodes.Conflict,
      `${what} ${names.bucket} already exists and was not made by the mesh for ${names.grant} (its stream ${names.stream} has the description ${JSON.stringify(info.config.description ?? null)}, expected ${JSON.stringify(names.marker)}); delete or rename that ${this.flavour.what}, or rename the requirement`,
    );
  }

  /** The adapter's connection, opened on first use and again after the server closed it. */
  private adminConnection(): Promise<JetStreamConnection> {
    if (this.admin) return this.admin;
    const opening = openJetStream(this.at.servers, ADMIN_TIMEOUT_MS, this.provider.admin, this.at.tls);
    const forget = () => {
      if (this.admin === opening) this.admin = undefined;
    };
    opening.then((c) => c.nc.closed().then(forget), forget);
    this.admin = opening;
    return opening;
  }

  /** Runs `fn` on the admin connection; maps every failure to a MeshError that says what to do. */
  private async withAdmin<T>(what: string, fn: (c: JetStreamConnection) => Promise<T>): Promise<T> {
    try {
      // JetStream's API goes quiet on every config reload (each nats.user change makes one),
      // and a cluster says the same while it elects a leader: tried again a few times first.
      return await retryJetStreamGap(async () => fn(await this.adminConnection()), JETSTREAM_GAP_WITHIN_MS);
    } catch (e) {
      throw this.adminError(what, e);
    }
  }

  private adminError(what: string, e: unknown): MeshError {
    if (e instanceof MeshError) return e;
    const at = `NATS provider ${this.provider.name} at ${this.provider.endpoint}`;
    const why = errorMessage(e) || "unknown error";
    const admin = this.provider.admin;
    if (isAuthError(e)) {
      return new MeshError(
        ErrorCodes.ProviderMisconfigured,
        admin
          ? `${at} rejected the admin user ${JSON.stringify(admin.username)} (${why}), so could not ${what}; check admin.username and the password given by the provider's admin.passwordEnv or admin.passwordFile`
          : `${at} requires authentication (${why}), so could not ${what}; give the provider admin.username and admin.passwordEnv or admin.passwordFile`,
        { cause: e },
      );
    }
    if (e instanceof PermissionViolationError) {
      return new MeshError(
        ErrorCodes.ProviderMisconfigured,
        `${at}: the admin user ${JSON.stringify(admin?.username ?? null)} may not ${what} (${why}); it needs publish and subscribe permission on $JS.API.> and _INBOX.>`,
        { cause: e },
      );
    }
    if (isJetStreamNotEnabled(e)) {
      // Also what a cluster says while it has no JetStream leader, hence retryable.
      return new MeshError(
        ErrorCodes.ProviderUnreachable,
        `${at}: JetStream is unreachable (${why}), so could not ${what}; check that the server runs with JetStream (nats-server -js) and, on a cluster, that it has a leader`,
        { retryable: true, cause: e },
      );
    }
    if (e instanceof JetStreamApiError) {
      return new MeshError(ErrorCodes.ProviderRejected, `${at} refused to ${what}: ${why} (JetStream error ${e.code})`, {
        retryable: e.status === 503,
        cause: e,
      });
    }
    if (isUnreachable(e)) {
      return new MeshError(
        ErrorCodes.ProviderUnreachable,
        `${at} is unreachable (${why}), so could not ${what}; check that the server runs, listens on that address and accepts connections from this node`,
        { retryable: true, cause: e },
      );
    }
    return new MeshError(ErrorCodes.ProviderRejected, `${at} failed to ${what}: ${why}`, { cause: e });
  }
}

/** The source of record as grant `mesh/records` binds it: its buckets and streams, comma-separated. */
function recordNames(): { buckets: string; streams: string } {
  return { buckets: SOURCE_OF_RECORD.buckets.join(","), streams: SOURCE_OF_RECORD.streams.join(",") };
}

/** The buckets and streams of the source of record that do not exist on the server. */
async function missingOfRecord(jsm: JetStreamManager): Promise<string[]> {
  const missing: string[] = [];
  for (const b of SOURCE_OF_RECORD.buckets) if (!(await streamInfo(jsm, streamName(Kinds.KvBucket, b)))) missing.push(`bucket ${b}`);
  for (const s of SOURCE_OF_RECORD.streams) if (!(await streamInfo(jsm, s))) missing.push(`stream ${s}`);
  return missing;
}

/** Connects to `server` without reconnects, with JetStream checked; `admin` is the identity, if any. */
async function openJetStream(
  server: string | string[],
  timeoutMs: number,
  admin: ProviderConfig["admin"] | undefined,
  tls: NatsEndpoints["tls"],
): Promise<JetStreamConnection> {
  const nc = await connect({
    servers: server,
    reconnect: false,
    timeout: timeoutMs,
    name: "mesh jetstream-stores adapter",
    ...natsAuth(admin),
    ...tls,
  });
  try {
    const jsm = await jetstreamManager(nc, { timeout: timeoutMs });
    return { nc, jsm, js: jsm.jetstream() };
  } catch (e) {
    await nc.close().catch(() => {});
    throw e;
  }
}

/** JetStream's codes for "stream not found" and "stream name already in use with a different configuration". */
const STREAM_NOT_FOUND = 10059;
const STREAM_NAME_IN_USE = 10058;

const isStreamNotFound = (e: unknown) => e instanceof JetStreamApiError && e.code === STREAM_NOT_FOUND;

/** The stream's info; undefined when there is no such stream. */
async function streamInfo(jsm: JetStreamManager, stream: string): Promise<StreamInfo | undefined> {
  try {
    return await jsm.streams.info(stream);
  } catch (e) {
    if (isStreamNotFound(e)) return undefined;
    throw e;
  }
}

const isAuthError = (e: unknown) => e instanceof AuthorizationError || (e instanceof Error && e.cause instanceof AuthorizationError);

/** How long a call that meets JetStream's reload gap is tried again before it counts as unreachable. */
const JETSTREAM_GAP_WITHIN_MS = 1_000;
/** JetStream off, or (on a cluster) without a leader; the class is not exported by the client. */
const isJetStreamNotEnabled = (e: unknown) => e instanceof Error && (e.name === "JetStreamNotEnabled" || /jetstream is not enabled/i.test(e.message));

const NETWORK_ERRORS = [ConnectionError, ClosedConnectionError, DrainingConnectionError, TimeoutError, NoRespondersError, RequestError, ProtocolError];

/** True when `e` says the server could not be reached or went away. */
function isUnreachable(e: unknown): boolean {
  return (
    NETWORK_ERRORS.some((c) => e instanceof c) ||
    (e instanceof Error && /ECONNREFUSED|ECONNRESET|ETIMEDOUT|EHOSTUNREACH|ENOTFOUND/.test(String((e.cause as { code?: string })?.code)))
  );
}
