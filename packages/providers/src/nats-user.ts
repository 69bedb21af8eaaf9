/**
 * The adapter of kind `nats.user`: an identity on a NATS server whose operator is the mesh
 * (decentralized JWT authentication, see nats-jwt.ts). Each generation is a fresh user nkey; the
 * adapter signs a user JWT for it with the account's signing key, with the permissions the
 * requirement asks for (`options.publish` / `options.subscribe`, by default the module's own
 * `app.<module>.>`), confined to its own inbox prefix (`inboxPrefix` in its binding; no other
 * identity's replies or deliveries, and answering requests only with `options.allowResponses`),
 * and hands it out as a standard decorated `.creds` file. Issuing one touches nothing on the server.
 *
 * Retiring a generation puts its key into the account's revocation list: the adapter re-signs
 * the account JWT with the operator's signing key and sends it as a claims update from the
 * system account; the server closes the key's connections at once and refuses it from then on.
 * Nothing reloads. What was issued and revoked is recorded in a KV bucket of the provider's
 * server ({@link RECORDS_BUCKET}, one key per generation), and the revocation list is rendered
 * from those records, so concurrent retirements by several instances all end up in it: each
 * writer pushes, looks the account up again, and pushes again until every revoked record is
 * there (a push made from a stale lookup is therefore repaired by whoever wrote after it). A
 * revocation is dropped from the list once that key's JWT has expired (it can no longer log in
 * anyway), so the account JWT stays small however many rotations there were.
 *
 * The provider's document names the server (`endpoint`), the admin's `.creds` (its
 * `admin.passwordFile`: a user of the account with JetStream, for the records) and the file of
 * the signing keys (`options.signingKeysFile`, encrypted under the master key, which the
 * services that issue and retire identities hold). `options.userExpiry` (default 90d) is how
 * long an issued JWT lives. `options.allowPublish` and `options.allowSubscribe` are the
 * operator's ceiling on what a requirement may ask for (nats-permissions.ts, by default each
 * module's own `app.<module>.>`): a requirement past it is refused before anything is issued.
 */
import { readFileSync } from "node:fs";
import { isAbsolute } from "node:path";
import { AuthorizationError, connect, type NatsConnection } from "@nats-io/transport-node";
import { Kvm, type KV } from "@nats-io/kv";
import { jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import {
  ErrorCodes,
  IDENTITY_RECORDS_LIMITS,
  Kinds,
  MeshError,
  errorMessage,
  grantId,
  isMeshError,
  isValidName,
  parseDuration,
  partIdentityPermissions,
  subjects,
  type Kind,
  type PartIdentityOptions,
  checkWithinCeiling,
  identityPermissions,
  natsCeiling,
  natsPermissions,
  type NatsPermissions,
  recordJson,
  storeWrite,
} from "@mesh/shared";
import { casModify, ensureBucketLimits, entryJson, isCasConflict, retryJetStreamGap, storeReplicas } from "@mesh/shared/runtime";
import { createLogger } from "@mesh/shared/service";
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
import { trustsOf } from "./mesh-ca.js";
import { unverifiedLogin, unverifiedServer } from "./provider-tls.js";
import { bindingServers, NATS_CA_FILE_OPTION, parseNatsEndpoints, type NatsEndpoints } from "./endpoint.js";
import { natsAuth } from "./nats-auth.js";
import {
  accountClaims,
  credsOf,
  issueUser,
  jwtOfCreds,
  newUserSeed,
  openSigningKeys,
  publicKeyOf,
  userClaims,
  userKey,
  withRevocations,
  type SigningKeys,
} from "./nats-jwt.js";

/** How long a login (connect and flush) may take, and each request to the server. */
export const LOGIN_TIMEOUT_MS = 3_000;
/** The KV bucket, on the provider's server, of what the adapter issued and revoked. */
export const RECORDS_BUCKET = "mesh-nats-identities";
/** How long an issued user JWT lives unless `options.userExpiry` says otherwise. */
export const DEFAULT_USER_EXPIRY_MS = 90 * 24 * 3600_000;
/** A JWT is issued again when less than this share of its life is left. */
const RENEW_AT_REMAINING = 0.5;
/** Clock skew allowed before a revocation of an expired key is dropped (at most the JWTs' lifetime). */
const PRUNE_SKEW_S = 300;
/** How often a writer pushes the revocation list before giving up on writers that never stop. */
const MAX_PUSH_ROUNDS = 20;

/** Makes the `nats.user` adapter of `provider`; throws `ProviderMisconfigured` for a bad endpoint. */
export const createNatsUserAdapter: AdapterFactory = (provider) => new NatsUserAdapter(provider, Kinds.NatsUser);

/**
 * Makes the `mesh.identity` adapter of `provider`, the mesh's own bus: a part's workload
 * identity, issued as a `nats.user` is but with the permissions of the part
 * (`partIdentityPermissions`) and delivered as the binding `identity` (`type` nats, `url`,
 * `creds`, `inboxPrefix`, and the grant, module, part and node it is for). On a bus without
 * authentication (a provider with no `options.signingKeysFile`) the binding carries the `url`
 * alone, and there is nothing to issue, retire or revoke.
 */
export const createMeshIdentityAdapter: AdapterFactory = (provider) => new NatsUserAdapter(provider, Kinds.MeshIdentity);

/** One issued generation, as recorded in {@link RECORDS_BUCKET}. */
interface IdentityRecord {
  grant: string;
  generation: number;
  /** The user's public key (`U…`). */
  user: string;
  /** The JWT last issued for it (not secret: it is useless without the seed). */
  jwt: string;
  expiresAt: number;
  /** Unix seconds of its revocation; absent while it may log in. */
  revokedAt?: number;
}

/** A revoked key's entry in the index `revoked.<user>`: what a push of the revocations reads. */
interface RevokedEntry {
  /** The record of the generation it was issued for. */
  key: string;
  user: string;
  revokedAt: number;
  expiresAt: number;
}

/** The index of revoked keys: `revoked.<user>`, two tokens, where a generation's record has three. */
const REVOKED = "revoked";
/** How many records are read at once. */
const READ_BATCH = 64;

const recordKey = (module: string, requirement: string, generation: number) => `${module}.${requirement}.${generation}`;
const nowS = () => Math.floor(Date.now() / 1000);

class NatsUserAdapter implements ProviderAdapter {
  readonly kinds: readonly Kind[];
  private readonly host: string;
  private readonly port: number;
  /** Every server of the endpoint (a cluster's, when it lists several): connections fail over between them. */
  private readonly servers: string[];
  private readonly url: string;
  /** What every connection to the provider's servers is given: TLS verified against its bundle, for a `tls://` endpoint. */
  private readonly tls: NatsEndpoints["tls"];
  private readonly caFile: string | undefined;
  private admin: Promise<{ nc: NatsConnection; kv: KV; jsm: JetStreamManager }> | undefined;
  private system: Promise<NatsConnection> | undefined;
  private keys: SigningKeys | undefined;
  /** A part identity on a bus without authentication: the url is all there is to hand out. */
  private readonly open: boolean;

  constructor(
    private readonly provider: ProviderConfig,
    private readonly kind: typeof Kinds.NatsUser | typeof Kinds.MeshIdentity,
  ) {
    const at = parseNatsEndpoints(provider);
    ({ host: this.host, port: this.port } = at.first);
    this.servers = at.servers;
    this.url = at.url;
    this.tls = at.tls;
    this.caFile = at.caFile;
    this.kinds = [kind];
    this.open = kind === Kinds.MeshIdentity && provider.options?.signingKeysFile === undefined;
  }

  generate() {
    return { seed: newUserSeed() };
  }

  async observe(req: ObserveRequest): Promise<ObserveResult> {
    checkGrantRef(req.grant);
    if (this.open) return { exists: true, details: { identity: "none: the server has no authentication" } };
    const { module, requirement, generation } = req.grant;
    const what = `observe ${grantId(module, requirement)}`;
    const account = await this.lookupAccount(what);
    const keys = this.signingKeys();
    const details: Record<string, string> = { account: keys.account };
    if (!account.signingKeys.includes(userIssuer(keys))) {
      details.conflict = `the server's account ${keys.account} no longer lists the mesh's signing key`;
      return { exists: false, details, missing: ["signing key"] };
    }
    const r = await this.readRecord(what, recordKey(module, requirement, generation));
    if (!r) return { exists: false, details, missing: ["user"] };
    Object.assign(details, describe(r), { nkey: r.user, expires: new Date(r.expiresAt * 1000).toISOString() });
    if (r.revokedAt !== undefined) return { exists: false, details, missing: ["user (revoked)"] };
    // One that has expired is gone; before then the rotator rotates it (CreateResult.expiresAt).
    if (r.expiresAt <= nowS()) return { exists: false, details, missing: ["a JWT that has not expired"] };
    return { exists: true, details };
  }

  async create(req: CreateRequest): Promise<CreateResult> {
    checkGrantRef(req.grant);
    const { module, requirement, generation } = req.grant;
    const grant = grantId(module, requirement);
    const what = `create ${grant}`;
    const seed = req.secret.seed;
    if (typeof seed !== "string" || !seed) {
      throw new MeshError(
        ErrorCodes.InvalidRequest,
        `secret material of ${grant} has no nkey seed (it was made for a users-file NATS); rotate ${grant} to issue it a JWT identity`,
      );
    }
    if (this.open) return this.result(undefined, seed, req);
    const publicKey = userKey(seed).getPublicKey();
    const permissions = this.permissions(req.grant, req.options);
    const account = await this.lookupAccount(what);
    const keys = this.signingKeys();
    if (!account.signingKeys.includes(userIssuer(keys))) {
      throw new MeshError(
        ErrorCodes.ProviderMisconfigured,
        `${this.at()}: the server's account ${keys.account} does not list the signing key in options.signingKeysFile, so could not ${what}; the server runs with another operator's accounts (see meshctl nats-config)`,
      );
    }
    const { kv } = await this.adminConn(what);
    const key = recordKey(module, requirement, generation);
    // Runs again over a fresh read when another writer got there first; what it does before it decides is idempotent.
    const out = await casModify(
      kv,
      key,
      () => this.readEntry(what, key),
      async (cur): Promise<IdentityRecord | undefined> => {
        const r = cur?.record;
        if (r?.revokedAt !== undefined) {
          throw new MeshError(
            ErrorCodes.Conflict,
            `${this.at()}: generation ${generation} of ${grant} was ${r.user === publicKey ? "" : `issued to another key (${r.user}) and `}revoked at ${new Date(r.revokedAt * 1000).toISOString()}; rotate ${grant} to issue a new identity`,
          );
        }
        if (r && r.user !== publicKey) {
          // A new secret for the same generation (one made again after it was lost): the old key
          // is kept as a revoked record of its own, and revoked before the new one is handed out.
          await this.indexRevoked(what, `${key}.replaced`, { ...r, revokedAt: nowS() });
          await this.pushRevocations(what);
        }
        if (r?.user === publicKey && this.current(r, permissions)) return undefined;
        const expiresAt = nowS() + Math.ceil(this.expiryMs() / 1000);
        const issued = await issueUser(keys, { name: `${module}_${requirement}_${generation}`, seed, permissions, expiresAt });
        return { grant, generation, user: publicKey, jwt: issued.jwt, expiresAt };
      },
      { around: (write) => this.kvCall(what, write) },
    );
    return this.result(out.wrote ? out.value : out.current!.record, seed, req, permissions);
  }

  async delete(req: DeleteRequest): Promise<void> {
    checkGrantRef(req.grant);
    if (this.open) return;
    const { module, requirement } = req.grant;
    const what = `delete ${grantId(module, requirement)}`;
    const { kv } = await this.adminConn(what);
    const keys = await this.kvCall(what, async () => {
      const out: string[] = [];
      for await (const k of await kv.keys(`${module}.${requirement}.*`)) out.push(k);
      return out;
    });
    for (const k of keys) await this.revokeRecord(what, k);
    await this.pushRevocations(what);
    // The keys stay revoked (the index keeps them until their JWTs expire); the grant's own
    // records go, so the grant declared again later starts afresh at generation 1 with new keys.
    for (const k of keys) await this.kvCall(what, () => kv.purge(k));
  }

  /** Revokes the key of `req.grant.generation`; the server closes its connections at once. */
  async retire(req: RetireRequest): Promise<void> {
    checkGrantRef(req.grant);
    if (this.open) return;
    const { module, requirement, generation } = req.grant;
    const what = `retire generation ${generation} of ${grantId(module, requirement)}`;
    await this.revokeRecord(what, recordKey(module, requirement, generation));
    await this.pushRevocations(what);
  }

  async login(req: LoginRequest): Promise<LoginResult> {
    const b = req.bindings;
    if (this.open && !b.creds && b.host && b.port) return this.openLogin(bindingServers(b), this.loginTls(b));
    const lacking = ["host", "port", "creds"].filter((k) => !b[k]);
    if (lacking.length > 0) return { ok: false, reason: "rejected", message: `the binding lacks ${lacking.join(", ")}` };
    const where = `${b.host}:${b.port}`;
    let user: string;
    try {
      user = userClaims(jwtOfCreds(b.creds!) ?? "").name;
    } catch {
      return { ok: false, reason: "rejected", message: "the binding's creds hold no user JWT" };
    }
    try {
      const nc = await connectWith(bindingServers(b), b.creds!, "mesh nats.user login", this.loginTls(b));
      await nc.close();
      return { ok: true };
    } catch (e) {
      const why = errorMessage(e);
      if (isRejection(e)) return { ok: false, reason: "rejected", message: `NATS at ${where} rejected identity ${user}: ${why}` };
      return (
        (this.loginTls(b) ? unverifiedLogin(`NATS at ${where}`, e, true) : undefined) ?? {
          ok: false,
          reason: "unreachable",
          message: `cannot log in to NATS at ${where}: ${why}`,
        }
      );
    }
  }

  async close(): Promise<void> {
    const [a, s] = [this.admin, this.system];
    this.admin = this.system = undefined;
    await Promise.all([a?.then((c) => c.nc.close()).catch(() => {}), s?.then((nc) => nc.close()).catch(() => {})]);
  }

  /** Whether `r` may be handed out again as it is: same permissions, and not due for renewal. */
  private current(r: IdentityRecord, p: NatsPermissions): boolean {
    let claims: ReturnType<typeof userClaims>;
    try {
      claims = userClaims(r.jwt);
    } catch {
      return false;
    }
    const same =
      JSON.stringify(claims.publish) === JSON.stringify(p.publish) &&
      JSON.stringify(claims.subscribe) === JSON.stringify(p.subscribe) &&
      JSON.stringify(claims.denyPublish) === JSON.stringify(p.denyPublish ?? []) &&
      JSON.stringify(claims.denySubscribe) === JSON.stringify(p.denySubscribe ?? []) &&
      (claims.responses !== undefined) === (p.allowResponses === true);
    return same && claims.issuer === userIssuer(this.signingKeys()) && r.expiresAt - nowS() >= (this.expiryMs() / 1000) * RENEW_AT_REMAINING;
  }

  /** What `module`'s requirement may do: as its options ask (nats.user, with its own inbox), or as its part needs (mesh.identity). */
  private permissions(grant: CreateRequest["grant"], options: CreateRequest["options"]): NatsPermissions {
    const { module } = grant;
    if (this.kind === Kinds.NatsUser) {
      const asked = natsPermissions(module, options);
      checkWithinCeiling(grant, asked, this.provider.name, natsCeiling(this.provider.name, this.provider.options));
      return identityPermissions(grant, asked);
    }
    const { part, node } = partIdentityOptions(options);
    return partIdentityPermissions(module, node, part);
  }

  /** The grant's bindings: the identity (none on an open bus) and, for a part's identity, whom it is for. */
  private result(r: IdentityRecord | undefined, seed: string, req: CreateRequest, p?: NatsPermissions): CreateResult {
    const url = this.url;
    const bundle = this.bundle();
    const where = { type: "nats", provider: this.provider.name, host: this.host, port: String(this.port), uri: url, ...bundle };
    const identity: Record<string, string> = r ? { username: userClaims(r.jwt).name, nkey: r.user, creds: credsOf(r.jwt, seed) } : {};
    // Which authorities its holders trust, as a certificate's grant records it: an authority's rotation waits on it.
    const trusts: Record<string, string> = bundle["ca.crt"] ? { trusts: trustsOf(bundle["ca.crt"]) } : {};
    const resource = { ...(r ? describe(r, p) : { identity: "none: the server has no authentication" }), ...trusts };
    const expires = r ? { expiresAt: new Date(r.expiresAt * 1000).toISOString() } : {};
    if (this.kind === Kinds.NatsUser) {
      // Its connections take their replies there (the client's inboxPrefix): the only inbox it may subscribe to.
      return {
        resource,
        ...expires,
        bindings: { ...where, ...identity, ...(r ? { inboxPrefix: subjects.grantInboxPrefix(req.grant.module, req.grant.requirement) } : {}) },
      };
    }
    const { module, requirement } = req.grant;
    const { part, node } = partIdentityOptions(req.options);
    return {
      resource,
      ...expires,
      bindings: {
        ...where,
        url,
        ...identity,
        inboxPrefix: subjects.partInboxPrefix(module, node, part),
        grant: grantId(module, requirement),
        module,
        part,
        node,
      },
    };
  }

  /** The provider's bundle as a binding's `ca.crt`, so that a holder verifies the server with its binding alone; none without one. */
  private bundle(): { "ca.crt"?: string } {
    if (!this.caFile) return {};
    try {
      return { "ca.crt": readFileSync(this.caFile, "utf8") };
    } catch (e) {
      throw new MeshError(
        ErrorCodes.ProviderMisconfigured,
        `${this.at()}: cannot read options.${NATS_CA_FILE_OPTION} ${this.caFile} (${(e as NodeJS.ErrnoException).code ?? errorMessage(e)}); it must be the PEM bundle that signs the server's certificate, on the provider's node`,
      );
    }
  }

  /** What a login with binding `b` verifies the server against: the bundle the binding carries, else the provider's. */
  private loginTls(b: LoginRequest["bindings"]): NatsEndpoints["tls"] {
    return b["ca.crt"] ? { tls: { ca: b["ca.crt"] } } : this.tls;
  }

  /** A login to a server without authentication: it answers. */
  private async openLogin(server: string[], tls: NatsEndpoints["tls"]): Promise<LoginResult> {
    try {
      const nc = await connect({ servers: server, reconnect: false, timeout: LOGIN_TIMEOUT_MS, name: "mesh identity login", ...tls });
      await nc.flush();
      await nc.close();
      return { ok: true };
    } catch (e) {
      if (isRejection(e)) {
        return {
          ok: false,
          reason: "rejected",
          message: `NATS at ${server.join(",")} asks for credentials, but the identity binding carries none (${errorMessage(e)}); the provider needs options.signingKeysFile`,
        };
      }
      return (
        (tls ? unverifiedLogin(`NATS at ${server.join(",")}`, e, true) : undefined) ?? {
          ok: false,
          reason: "unreachable",
          message: `cannot reach NATS at ${server.join(",")}: ${errorMessage(e)}`,
        }
      );
    }
  }

  /**
   * Marks the record at `key` revoked (now), unless it is already, and indexes it under
   * `revoked.<key>` (which is all a push reads); a missing record is fine.
   */
  private async revokeRecord(what: string, key: string): Promise<void> {
    const { kv } = await this.adminConn(what);
    const out = await casModify(
      kv,
      key,
      () => this.readEntry(what, key),
      (cur): IdentityRecord | undefined => (cur && cur.record.revokedAt === undefined ? { ...cur.record, revokedAt: nowS() } : undefined),
      { around: (write) => this.kvCall(what, write) },
    );
    const revoked = out.wrote ? out.value : out.current?.record;
    if (revoked) await this.indexRevoked(what, key, revoked);
  }

  private async indexRevoked(what: string, key: string, r: IdentityRecord): Promise<void> {
    const { kv } = await this.adminConn(what);
    const entry: RevokedEntry = { key, user: r.user, revokedAt: r.revokedAt!, expiresAt: r.expiresAt };
    const index = `${REVOKED}.${r.user}`;
    const data = recordJson(entry);
    await this.kvCall(what, () => storeWrite(kv, index, () => kv.put(index, data), { bytes: data.length }));
  }

  /** Every revoked key the records know of, read in parallel. */
  private async revokedEntries(what: string): Promise<Array<{ key: string; entry: RevokedEntry }>> {
    const { kv } = await this.adminConn(what);
    return this.kvCall(what, async () => {
      const names: string[] = [];
      for await (const k of await kv.keys(`${REVOKED}.*`)) names.push(k);
      const out: Array<{ key: string; entry: RevokedEntry }> = [];
      for (let i = 0; i < names.length; i += READ_BATCH) {
        const batch = await Promise.all(names.slice(i, i + READ_BATCH).map((k) => kv.get(k)));
        batch.forEach((e, j) => {
          if (e?.operation === "PUT") out.push({ key: names[i + j]!, entry: entryJson(e) as RevokedEntry });
        });
      }
      return out;
    });
  }

  /**
   * Makes the server's account JWT revoke every revoked record's key: looks it up, adds what is
   * missing, drops revocations of keys whose JWT has expired (and their records), pushes it, and
   * looks again, until a lookup shows everything the records say and the server enforces it.
   *
   * Both are asked because they can differ: nats-server (2.9.10, and still) stores a claims
   * update, then reads its store again and applies what it read, in the goroutine of the
   * connection that sent it, so of two writers' updates that arrive together the older can be
   * applied last. The lookup (the store) then shows the newer JWT while the account in memory,
   * which decides logins, keeps the older one's revocations. A push makes the server apply what
   * it stores again.
   */
  private async pushRevocations(what: string): Promise<void> {
    const { kv } = await this.adminConn(what);
    const keys = this.signingKeys();
    for (let round = 0; round < MAX_PUSH_ROUNDS; round++) {
      const revoked = await this.revokedEntries(what);
      const skew = Math.min(PRUNE_SKEW_S, Math.ceil(this.expiryMs() / 1000));
      const expired = revoked.filter((r) => r.entry.expiresAt + skew < nowS());
      const live = revoked.filter((r) => !expired.includes(r));
      const account = await this.lookupAccount(what);
      const wanted = { ...account.revocations };
      for (const { entry } of expired) delete wanted[entry.user];
      for (const { entry } of live) wanted[entry.user] = Math.max(wanted[entry.user] ?? 0, entry.revokedAt);
      const stored =
        live.every(({ entry }) => (account.revocations[entry.user] ?? 0) >= entry.revokedAt) &&
        expired.every(({ entry }) => !(entry.user in account.revocations));
      const enforced = stored ? await this.enforcedRevocations(what) : undefined;
      const done = stored && (enforced === undefined || live.every(({ entry }) => (enforced[entry.user] ?? 0) >= entry.revokedAt));
      if (done) {
        for (const r of expired) {
          await this.kvCall(what, async () => {
            const rec = await kv.get(r.entry.key);
            if (rec?.operation === "PUT" && (entryJson(rec) as IdentityRecord).user === r.entry.user) await this.erase(r.entry.key);
            await this.erase(r.key);
          });
        }
        return;
      }
      let jwt = await withRevocations(account.jwt, keys.operatorSigningSeed, wanted);
      if (jwt === account.jwt) {
        // Stored, not enforced: the server applies an update only when it differs from what it
        // stores, and the same claims signed within the same second are the same JWT.
        await new Promise((r) => setTimeout(r, 1_000 - (Date.now() % 1_000)));
        jwt = await withRevocations(account.jwt, keys.operatorSigningSeed, wanted);
      }
      await this.systemRequest(what, `$SYS.REQ.ACCOUNT.${keys.account}.CLAIMS.UPDATE`, jwt, (reply) => {
        const r = JSON.parse(reply) as { data?: { code?: number; message?: string }; error?: { code?: number; description?: string } };
        if (r.error || r.data?.code !== 200) {
          throw new MeshError(
            ErrorCodes.ProviderRejected,
            `${this.at()} refused the account's claims update, so could not ${what}: ${r.error?.description ?? r.data?.message ?? reply}`,
          );
        }
      });
    }
    throw new MeshError(
      ErrorCodes.ProviderUnreachable,
      `${this.at()}: the account's revocations did not settle after ${MAX_PUSH_ROUNDS} updates, so could not ${what}; is another writer changing the account?`,
      {
        retryable: true,
      },
    );
  }

  /**
   * The revocations the server enforces now (its account in memory: `revoked_user` of the
   * account's INFO), in unix seconds by user key; undefined when the server has not loaded the
   * account, which it then loads from its store when it is first used.
   */
  private async enforcedRevocations(what: string): Promise<Record<string, number> | undefined> {
    const keys = this.signingKeys();
    return this.systemRequest(what, `$SYS.REQ.ACCOUNT.${keys.account}.INFO`, "", (reply) => {
      const r = JSON.parse(reply) as { data?: { revoked_user?: Record<string, string> } };
      if (!r.data) return undefined;
      return Object.fromEntries(Object.entries(r.data.revoked_user ?? {}).map(([user, at]) => [user, Math.floor(Date.parse(at) / 1000)]));
    });
  }

  /** The account's JWT as the server has it, with its signing keys and revocations. */
  private async lookupAccount(what: string): Promise<ReturnType<typeof accountClaims> & { jwt: string }> {
    const keys = this.signingKeys();
    return this.systemRequest(what, `$SYS.REQ.ACCOUNT.${keys.account}.CLAIMS.LOOKUP`, "", (jwt) => {
      if (!jwt.startsWith("ey")) {
        throw new MeshError(
          ErrorCodes.ProviderMisconfigured,
          `${this.at()} does not know account ${keys.account} (${jwt || "no JWT"}), so could not ${what}; run the server with the configuration meshctl nats-config prints`,
        );
      }
      return { ...accountClaims(jwt), jwt };
    });
  }

  /** A request as the system account's user; its reply goes through `parse`. */
  private async systemRequest<T>(what: string, subject: string, body: string, parse: (reply: string) => T): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      const pending = (this.system ??= connectWith(this.servers, this.signingKeys().systemUserCreds, "mesh nats.user adapter (system)", this.tls));
      let nc: NatsConnection;
      try {
        nc = await pending;
      } catch (e) {
        if (this.system === pending) this.system = undefined;
        throw this.connectError(what, "the system account's user", e);
      }
      try {
        const reply = await nc.request(subject, body, { timeout: LOGIN_TIMEOUT_MS });
        return parse(reply.string());
      } catch (e) {
        if (isMeshError(e)) throw e;
        if (this.system === pending && nc.isClosed()) this.system = undefined;
        if (attempt === 0 && nc.isClosed()) continue;
        throw new MeshError(
          ErrorCodes.ProviderUnreachable,
          `${this.at()} did not answer ${subject.split(".").slice(-2).join(" ").toLowerCase()} (${errorMessage(e)}), so could not ${what}`,
          {
            retryable: true,
            cause: e,
          },
        );
      }
    }
  }

  /** The admin's connection and the records bucket, opened on first use and again after the server closed it. */
  private async adminConn(what: string): Promise<{ nc: NatsConnection; kv: KV; jsm: JetStreamManager }> {
    const admin = this.provider.admin?.password;
    if (!admin) {
      throw new MeshError(
        ErrorCodes.ProviderMisconfigured,
        `${this.at()}: give admin.passwordFile, the .creds of a user of the account with JetStream, so the adapter can keep its records`,
      );
    }
    const pending = (this.admin ??= (async () => {
      const nc = await connect({
        servers: this.servers,
        reconnect: false,
        timeout: LOGIN_TIMEOUT_MS,
        name: "mesh nats.user adapter",
        ...natsAuth(this.provider.admin),
        ...this.tls,
      });
      try {
        const l = IDENTITY_RECORDS_LIMITS;
        const kv = await retryJetStreamGap(() =>
          new Kvm(nc).create(RECORDS_BUCKET, {
            replicas: storeReplicas(nc.info),
            history: l.history,
            max_bytes: l.maxBytes,
            maxValueSize: l.maxValueSize,
            description: "mesh nats.user: identities issued and revoked",
          }),
        );
        const jsm = await jetstreamManager(nc, { timeout: LOGIN_TIMEOUT_MS });
        // A bucket made before it had limits gets them; what that keeps is said in the log of the service using the adapter.
        await retryJetStreamGap(() => ensureBucketLimits(jsm, RECORDS_BUCKET, l, recordsLog()));
        void nc.closed().then(() => {
          if (this.admin === pending) this.admin = undefined;
        });
        return { nc, kv, jsm };
      } catch (e) {
        await nc.close().catch(() => {});
        throw e;
      }
    })());
    try {
      return await pending;
    } catch (e) {
      if (this.admin === pending) this.admin = undefined;
      throw this.connectError(what, `the admin ${JSON.stringify(this.provider.admin?.username ?? "")}`, e);
    }
  }

  /**
   * Removes every message of `key` from the records' stream. A KV purge or delete would leave a
   * marker behind for good (2.9 has no marker TTL), and listing the index would read one per
   * revocation ever pruned.
   */
  private async erase(key: string): Promise<void> {
    const { jsm } = await this.adminConn(`erase ${key}`);
    await jsm.streams.purge(`KV_${RECORDS_BUCKET}`, { filter: `$KV.${RECORDS_BUCKET}.${key}` });
  }

  private async readEntry(what: string, key: string): Promise<{ record: IdentityRecord; revision: number } | undefined> {
    const { kv } = await this.adminConn(what);
    const e = await this.kvCall(what, () => kv.get(key));
    if (!e || e.operation !== "PUT") return undefined;
    return { record: entryJson(e) as IdentityRecord, revision: e.revision };
  }

  private async readRecord(what: string, key: string): Promise<IdentityRecord | undefined> {
    return (await this.readEntry(what, key))?.record;
  }

  /** A KV call on the admin connection; its failure is a MeshError that says what to do. */
  private async kvCall<T>(what: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await retryJetStreamGap(fn);
    } catch (e) {
      if (isMeshError(e) || isCasConflict(e)) throw e;
      throw new MeshError(
        ErrorCodes.ProviderUnreachable,
        `${this.at()}: the records bucket ${RECORDS_BUCKET} did not answer (${errorMessage(e)}), so could not ${what}`,
        {
          retryable: true,
          cause: e,
        },
      );
    }
  }

  /** The signing keys, read and opened once; throws `ProviderMisconfigured` saying why they cannot be. */
  private signingKeys(): SigningKeys {
    if (this.keys) return this.keys;
    const file = this.textOption("signingKeysFile");
    if (!file || !isAbsolute(file)) {
      throw new MeshError(
        ErrorCodes.ProviderMisconfigured,
        `${this.at()}: options.signingKeysFile ${file ? `${JSON.stringify(file)} is not an absolute path` : "is missing"}; give the file of the mesh's NATS signing keys (meshctl nats-config writes it)`,
      );
    }
    const mk = this.provider.masterKey;
    if (!mk)
      throw new MeshError(ErrorCodes.ProviderMisconfigured, `${this.at()}: this service has no master key, so cannot open options.signingKeysFile ${file}`);
    try {
      this.keys = openSigningKeys(mk, readFileSync(file, "utf8"));
    } catch (e) {
      throw new MeshError(
        ErrorCodes.ProviderMisconfigured,
        `${this.at()}: cannot open options.signingKeysFile ${file} (${(e as NodeJS.ErrnoException).code ?? errorMessage(e)}); it must be readable by this service and sealed under the master key it runs with`,
        { cause: e },
      );
    }
    return this.keys;
  }

  private expiryMs(): number {
    const v = this.textOption("userExpiry");
    if (v === undefined) return DEFAULT_USER_EXPIRY_MS;
    let ms: number;
    try {
      ms = parseDuration(v);
    } catch {
      ms = NaN;
    }
    if (!(ms >= 1_000))
      throw new MeshError(
        ErrorCodes.ProviderMisconfigured,
        `${this.at()}: options.userExpiry ${JSON.stringify(v)} is not a duration of at least 1s (e.g. 90d)`,
      );
    return ms;
  }

  /** A provider option that is one value, not a list; throws `ProviderMisconfigured` for a list. */
  private textOption(name: string): string | undefined {
    const v = this.provider.options?.[name];
    if (Array.isArray(v)) throw new MeshError(ErrorCodes.ProviderMisconfigured, `${this.at()}: options.${name} is a list; give one value`);
    return v;
  }

  private connectError(what: string, who: string, e: unknown): MeshError {
    const unverified = this.tls ? unverifiedServer(this.at(), what, e, true) : undefined;
    if (unverified) return unverified;
    if (isRejection(e)) {
      return new MeshError(
        ErrorCodes.ProviderMisconfigured,
        `${this.at()} rejected ${who} (${errorMessage(e)}), so could not ${what}; check the provider's admin.passwordFile and options.signingKeysFile`,
        {
          cause: e,
        },
      );
    }
    return new MeshError(
      ErrorCodes.ProviderUnreachable,
      `${this.at()} is unreachable (${errorMessage(e)}), so could not ${what}; check that nats-server runs and listens on that address`,
      {
        retryable: true,
        cause: e,
      },
    );
  }

  private at(): string {
    return `NATS provider ${this.provider.name} at ${this.provider.endpoint}`;
  }
}

/** Where the records bucket's limits are said to have changed or been kept: once per process, beside the service's own log. */
let records: ReturnType<typeof createLogger> | undefined;
const recordsLog = () => (records ??= createLogger("nats.user records"));

/** The key that signs users: the account's signing key. */
const userIssuer = (keys: SigningKeys) => publicKeyOf(keys.accountSigningSeed);

/** Non-secret names of an identity, for `resource` and `observe`'s details. */
function describe(r: IdentityRecord, p?: NatsPermissions): Record<string, string> {
  const perms = p ?? userClaims(r.jwt);
  return { user: userClaims(r.jwt).name, publish: perms.publish.join(","), subscribe: perms.subscribe.join(",") };
}

/** The part and node of a `mesh.identity` requirement (the resolver sets them); `InvalidRequest` when they are not names. */
function partIdentityOptions(options: CreateRequest["options"]): PartIdentityOptions {
  const part = options?.part;
  const node = options?.node;
  if (typeof part !== "string" || typeof node !== "string" || !isValidName(part) || !isValidName(node)) {
    throw new MeshError(
      ErrorCodes.InvalidRequest,
      `a ${Kinds.MeshIdentity} requirement names its part and node in its options (the resolver sets them), not ${JSON.stringify(options ?? {})}`,
    );
  }
  return { part, node };
}

/** Connects with a `.creds` file, without reconnecting, and flushes, so a refused login has surfaced. */
async function connectWith(server: string | string[], creds: string, name: string, tls: NatsEndpoints["tls"]): Promise<NatsConnection> {
  const nc = await connect({ servers: server, reconnect: false, timeout: LOGIN_TIMEOUT_MS, name, ...natsAuth({ username: "", password: creds }), ...tls });
  try {
    await nc.flush();
    return nc;
  } catch (e) {
    await nc.close().catch(() => {});
    throw e;
  }
}

/** True when a connect failed because the server refused the identity (unknown, revoked or expired). */
const isRejection = (e: unknown) =>
  e instanceof AuthorizationError || /authorization violation|authentication (revoked|expired)|user authentication/i.test(errorMessage(e));
