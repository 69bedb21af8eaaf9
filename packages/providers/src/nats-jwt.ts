/**
 * NATS decentralized authentication, as the mesh uses it: the mesh is the *operator*. It keeps
 * an operator key, one account for the mesh (with a signing key) and the system account, and
 * issues every identity as a user JWT signed by the account's signing key, with its permissions
 * inside. The server runs with the full account resolver: issuing a user changes nothing on the
 * server, and a retired user's key goes into the account's revocation list, pushed to the
 * server as a claims update. Nothing here talks to NATS; nats-user.ts does.
 *
 * Keys come in two sets, so that what runs online can be told from what does not:
 * - the *identity* seeds of the operator and the two accounts: needed only to make the server's
 *   configuration (`meshctl nats-config`) and, once, the account JWTs;
 * - the *signing* keys ({@link SigningKeys}): the operator's signing key (re-signs the account
 *   JWT with its revocations), the account's signing key (signs users), and the credentials of a
 *   system-account user (sends the claims update). The provisioner and the rotator hold these;
 *   they are on disk only encrypted under the master key.
 *
 * Checked with Debian's nats-server 2.9.10: an account needs its NATS
 * and JetStream limits set (-1), or no client connects and JetStream is off.
 */
import {
  Algorithms,
  createAccount,
  createOperator,
  createUser,
  encodeAccount,
  encodeOperator,
  encodeUser,
  fromSeed,
  type Account,
  type ClaimsData,
  type KeyPair,
  type RevocationList,
} from "@nats-io/jwt";
import { createPrivateKey, createPublicKey, sign as ed25519Sign, type KeyObject } from "node:crypto";
import { Codec } from "@nats-io/nkeys/lib/codec.js";
import { ErrorCodes, MeshError, decrypt, encrypt, type Encrypted, type MasterKey } from "@mesh/shared";

/** NATS limits of both accounts: none (the library's defaults let no connection in). */
const OPEN_NATS: NonNullable<Account["limits"]> = { subs: -1, data: -1, payload: -1, imports: -1, exports: -1, wildcards: true, conn: -1, leaf: -1 };
/** The mesh's account also has JetStream without limits; the system account may not have it at all. */
const UNLIMITED: NonNullable<Account["limits"]> = { ...OPEN_NATS, mem_storage: -1, disk_storage: -1, streams: -1, consumer: -1 };

/** The keys that the services issuing and retiring identities hold online. */
export interface SigningKeys {
  /** The operator's signing key (seed `SO…`): signs the account JWT, with its revocations. */
  operatorSigningSeed: string;
  /** The mesh's account (public key `A…`), whose users the mesh issues. */
  account: string;
  /** The account's signing key (seed `SA…`): signs the users. */
  accountSigningSeed: string;
  /** The system account (public key `A…`). */
  systemAccount: string;
  /** A user of the system account, as a `.creds` file: sends claims lookups and updates. */
  systemUserCreds: string;
}

/** The identity seeds, needed only to set a server up (never online). */
export interface IdentitySeeds {
  operator: string;
  account: string;
  systemAccount: string;
}

/** Everything a new operator setup is made of. */
export interface OperatorSetup {
  operatorJwt: string;
  systemAccountJwt: string;
  accountJwt: string;
  signing: SigningKeys;
  identity: IdentitySeeds;
  /** The operator's own user of the mesh's account, with every permission, as a `.creds` file. */
  adminCreds: string;
}

const text = (b: Uint8Array) => new TextDecoder().decode(b);

/** The DER prefix of a PKCS#8 Ed25519 private key; the 32-byte seed follows it. */
const PKCS8_ED25519 = Buffer.from("302e020100300506032b657004220420", "hex");

/**
 * An nkey that signs with Node's native Ed25519 and knows its public key from the start. The
 * nkeys library derives the key pair from the seed again (in JavaScript) for every public-key
 * read and every signature, about 10 ms each here; Ed25519 is deterministic, so the signatures
 * are the same bytes.
 */
class NativeKeyPair implements KeyPair {
  private readonly publicKey: string;
  private readonly key: KeyObject;
  constructor(private readonly kp: KeyPair) {
    const { prefix, buf } = Codec.decodeSeed(kp.getSeed());
    this.key = createPrivateKey({ key: Buffer.concat([PKCS8_ED25519, Buffer.from(buf)]), format: "der", type: "pkcs8" });
    const spki = createPublicKey(this.key).export({ format: "der", type: "spki" });
    this.publicKey = text(Codec.encode(prefix, new Uint8Array(spki.subarray(spki.length - 32))));
  }
  getPublicKey() {
    return this.publicKey;
  }
  private privateKey: Uint8Array | undefined;
  /** Derived once (the library asks for it on every signature, to check that a signer has a seed). */
  getPrivateKey() {
    return (this.privateKey ??= this.kp.getPrivateKey());
  }
  getSeed() {
    return this.kp.getSeed();
  }
  sign(input: Uint8Array) {
    return new Uint8Array(ed25519Sign(null, input, this.key));
  }
  verify(input: Uint8Array, sig: Uint8Array) {
    return this.kp.verify(input, sig);
  }
  clear() {
    this.kp.clear();
  }
  seal(input: Uint8Array, recipient: string, nonce?: Uint8Array) {
    return this.kp.seal(input, recipient, nonce);
  }
  open(message: Uint8Array, sender: string) {
    return this.kp.open(message, sender);
  }
}

/** Signing keys by seed, made once: a service signs with the same few keys over and over. */
const signers = new Map<string, NativeKeyPair>();
function signer(seed: string): NativeKeyPair {
  let kp = signers.get(seed);
  if (!kp) {
    kp = new NativeKeyPair(fromSeed(new TextEncoder().encode(seed)));
    signers.set(seed, kp);
  }
  return kp;
}

/** The public key of a signing seed. */
export const publicKeyOf = (seed: string) => signer(seed).getPublicKey();
const seedOf = (kp: KeyPair) => text(kp.getSeed());

/**
 * A new operator, system account and mesh account (named `accountName`), each account with
 * every limit open, the mesh's account with a signing key, and the operator's admin user.
 */
export async function createOperatorSetup(opts: { operatorName?: string; accountName?: string } = {}): Promise<OperatorSetup> {
  const operator = createOperator();
  const operatorSigning = createOperator();
  const system = createAccount();
  const account = createAccount();
  const accountSigning = createAccount();
  const signer = { algorithm: Algorithms.v2, signer: operatorSigning };
  const operatorJwt = await encodeOperator(opts.operatorName ?? "mesh", operator, {
    signing_keys: [operatorSigning.getPublicKey()],
    system_account: system.getPublicKey(),
  });
  const systemAccountJwt = await encodeAccount("SYS", system, { limits: OPEN_NATS }, signer);
  const accountJwt = await encodeAccount(opts.accountName ?? "MESH", account, { limits: UNLIMITED, signing_keys: [accountSigning.getPublicKey()] }, signer);
  const sysUser = createUser();
  const sysJwt = await encodeUser("mesh-system", sysUser, system, {});
  const admin = createUser();
  const adminJwt = await encodeUser("mesh-admin", admin, accountSigning, { issuer_account: account.getPublicKey() });
  return {
    operatorJwt,
    systemAccountJwt,
    accountJwt,
    signing: {
      operatorSigningSeed: seedOf(operatorSigning),
      account: account.getPublicKey(),
      accountSigningSeed: seedOf(accountSigning),
      systemAccount: system.getPublicKey(),
      systemUserCreds: credsOf(sysJwt, seedOf(sysUser)),
    },
    identity: { operator: seedOf(operator), account: seedOf(account), systemAccount: seedOf(system) },
    adminCreds: credsOf(adminJwt, seedOf(admin)),
  };
}

/** Where and how a server of the mesh's operator listens and keeps its state. */
export interface ServerListen {
  host: string;
  port: number;
  monitorPort?: number;
  /** JetStream's store directory. */
  storeDir: string;
  /** The full resolver's directory of account JWTs. */
  resolverDir: string;
  pidFile?: string;
  /** The `cluster { … }` block of a cluster member, as text, if any. */
  cluster?: string;
  /** `server_name`: unique in a cluster, and kept across restarts (JetStream's replicas know the server by it). */
  serverName?: string;
  /**
   * TLS for clients (`tls { … }`): the server's certificate and key (files read again on SIGHUP,
   * so a certificate renewed in place is served without a change here), and with `caFile` the
   * authority clients' certificates are verified against, when `verify` asks for them.
   */
  tls?: { certFile: string; keyFile: string; caFile?: string; verify?: boolean };
  /**
   * TLS on the cluster's routes, written into the `cluster { … }` block: each member presents
   * its certificate (server and client usage) and verifies every other member's against
   * `caFile` (`verify`), so only a holder of a certificate of that authority joins the cluster:
   * the route's authentication.
   */
  routeTls?: { certFile: string; keyFile: string; caFile: string };
  /**
   * How often the full resolver compares its account JWTs with the other servers' and takes
   * the newer ones (nats-server's `resolver.interval`). A server that was down when an account
   * was updated (a revocation) learns of it only then: nats-server 2.9.10 does not sync when it
   * starts or rejoins (server/accounts.go, DirAccResolver.Start: a ticker only). Default
   * {@link CLUSTER_RESOLVER_SYNC} on a cluster member, `2m` on a lone server (nothing to sync with).
   */
  resolverSyncInterval?: string;
}

/** A cluster member's resolver sync interval: how long a server back from an outage may still accept a revoked identity, at most. */
export const CLUSTER_RESOLVER_SYNC = "5s";

/** The server's `max_control_line`, in bytes: room for a CONNECT carrying the longest user JWT the mesh issues. */
export const MAX_CONTROL_LINE = 16_384;

/**
 * How long the server waits for a client's CONNECT after its INFO, and for a TLS handshake, in
 * seconds (nats-server's default is 2 for both). A client signs the server's nonce first; on a
 * loaded two-core machine a test's connection took longer than 2 s to answer, and the server
 * closed it mid-handshake (EPIPE); TLS handshakes timed out at 2 s there too ("TLS handshake
 * timeout" in the server's log while the whole suite ran), and a service cut off that way
 * mid-rotation was restarted.
 */
export const AUTH_TIMEOUT_S = 5;

/**
 * The nats-server configuration for the operator: the operator JWT, the system account, the
 * full resolver (account JWTs kept in `resolverDir`, updates pushed by the mesh, deletes
 * refused) and the two accounts preloaded, so the server accepts their users from its first
 * start. Every string is written double-quoted, and only printable text without `"` or `\`
 * is accepted (the config format's escapes are not JSON's): anything else is refused.
 */
export function operatorServerConfig(
  setup: Pick<OperatorSetup, "operatorJwt" | "systemAccountJwt" | "accountJwt"> & { systemAccount: string; account: string },
  at: ServerListen,
): string {
  const q = (v: string) => {
    if (!/^[\x20\x21\x23-\x5b\x5d-\x7e]+$/.test(v))
      throw new MeshError(ErrorCodes.InvalidRequest, `${JSON.stringify(v)} cannot be written into a NATS config: use printable characters without " or \\`);
    return `"${v}"`;
  };
  return [
    "# Written by meshctl: the mesh is this server's NATS operator (decentralized JWT authentication).",
    "# Identities are user JWTs the mesh signs; nothing here changes when one is issued or revoked.",
    ...(at.serverName ? [`server_name: ${q(at.serverName)}`] : []),
    `listen: ${q(`${at.host}:${at.port}`)}`,
    ...(at.tls
      ? [
          `tls { cert_file: ${q(at.tls.certFile)}, key_file: ${q(at.tls.keyFile)}${at.tls.caFile ? `, ca_file: ${q(at.tls.caFile)}` : ""}${at.tls.verify ? ", verify: true" : ""}, timeout: ${AUTH_TIMEOUT_S} }`,
        ]
      : []),
    ...(at.monitorPort ? [`http: ${q(`${at.host}:${at.monitorPort}`)}`] : []),
    ...(at.pidFile ? [`pid_file: ${q(at.pidFile)}`] : []),
    `jetstream { store_dir: ${q(at.storeDir)} }`,
    // A user JWT, with its permissions, comes in the client's CONNECT line: the control plane's
    // own identities, which list their JetStream API subjects, need more than the default 4 KB.
    `max_control_line: ${MAX_CONTROL_LINE}`,
    `authorization { timeout: ${AUTH_TIMEOUT_S} }`,
    `operator: ${q(setup.operatorJwt)}`,
    `system_account: ${q(setup.systemAccount)}`,
    `resolver: { type: full, dir: ${q(at.resolverDir)}, allow_delete: false, interval: ${q(at.resolverSyncInterval ?? (at.cluster ? CLUSTER_RESOLVER_SYNC : "2m"))}, limit: 1000 }`,
    "resolver_preload: {",
    `  ${setup.systemAccount}: ${q(setup.systemAccountJwt)}`,
    `  ${setup.account}: ${q(setup.accountJwt)}`,
    "}",
    ...(at.cluster ? [withRouteTls(at.cluster, at.routeTls, q)] : []),
    "",
  ].join("\n");
}

/** The cluster block with `tls { … }` for its routes, when asked; refused when the block has TLS of its own. */
function withRouteTls(cluster: string, tls: ServerListen["routeTls"], q: (v: string) => string): string {
  if (!tls) return cluster;
  if (/\btls\s*[{:]/.test(cluster)) {
    throw new MeshError(ErrorCodes.InvalidRequest, "the cluster block given has a tls { … } of its own: leave it out, or leave out the mesh's TLS for routes");
  }
  const open = cluster.indexOf("{");
  if (!/^\s*cluster\s*\{/.test(cluster) || open < 0) throw new MeshError(ErrorCodes.InvalidRequest, "the cluster block given does not begin with cluster {");
  const block = `tls { cert_file: ${q(tls.certFile)}, key_file: ${q(tls.keyFile)}, ca_file: ${q(tls.caFile)}, verify: true, timeout: ${AUTH_TIMEOUT_S} }`;
  return `${cluster.slice(0, open + 1)}\n  ${block}${cluster.slice(open + 1)}`;
}

/** What a user JWT allows: publish and subscribe allow lists (empty: nothing). */
export interface UserPermissions {
  publish: readonly string[];
  subscribe: readonly string[];
  /** Denied even where `publish` allows (the server's deny wins). */
  denyPublish?: readonly string[];
  /** Denied even where `subscribe` allows (for a wildcard that reaches them, the server drops their messages). */
  denySubscribe?: readonly string[];
  /** It may answer each request it receives once, within {@link RESPONSE_TTL_MS}; absent: it answers none. */
  allowResponses?: boolean;
}

/**
 * How long after a request its receiver may answer it: the longest any of the mesh's requests
 * waits for its answer (`meshctl verify` and `rotate`, 30 s) and as long again for a service
 * slow under load.
 */
export const RESPONSE_TTL_MS = 60_000;

const allowOrDeny = (subjects: readonly string[]) => (subjects.length > 0 ? { allow: [...subjects] } : { deny: [">"] });

/** A JWT permission list: an allow list (empty: a deny of everything) and its denies. */
const permissionOf = (allow: readonly string[], deny: readonly string[] | undefined) => ({
  ...allowOrDeny(allow),
  ...(deny?.length && allow.length ? { deny: [...deny] } : {}),
});

/**
 * A user JWT for the key of `seed`, signed by the account's signing key, allowed `permissions`
 * (answering the requests it receives only when they say so), expiring at `expiresAt` (unix
 * seconds); returned with the `.creds` file a client connects with.
 */
export async function issueUser(
  signing: Pick<SigningKeys, "account" | "accountSigningSeed">,
  user: { name: string; seed: string; permissions: UserPermissions; expiresAt?: number },
): Promise<{ jwt: string; creds: string; publicKey: string }> {
  const kp = userKey(user.seed);
  const jwt = await encodeUser(
    user.name,
    kp.getPublicKey(),
    signer(signing.accountSigningSeed),
    {
      issuer_account: signing.account,
      pub: permissionOf(user.permissions.publish, user.permissions.denyPublish),
      sub: permissionOf(user.permissions.subscribe, user.permissions.denySubscribe),
      // One answer per request received, within the window (a Go duration: nanoseconds).
      ...(user.permissions.allowResponses ? { resp: { max: 1, ttl: RESPONSE_TTL_MS * 1_000_000 } } : {}),
    },
    user.expiresAt === undefined ? {} : { exp: user.expiresAt },
  );
  return { jwt, creds: credsOf(jwt, user.seed), publicKey: kp.getPublicKey() };
}

/** The user key pair of `seed`; throws MeshError `InvalidRequest` for anything but a user seed (`SU…`). */
export function userKey(seed: string): KeyPair {
  let kp: KeyPair;
  try {
    kp = fromSeed(new TextEncoder().encode(seed));
  } catch {
    throw new MeshError(ErrorCodes.InvalidRequest, "the identity's secret is not an nkey seed");
  }
  const native = new NativeKeyPair(kp);
  if (!native.getPublicKey().startsWith("U")) throw new MeshError(ErrorCodes.InvalidRequest, "the identity's secret is not the seed of a user nkey (SU…)");
  return native;
}

/**
 * The decorated `.creds` file of a user JWT and its key's seed, laid out as `nsc` writes it:
 * with the closing line of stars after the seed. The client's parser needs a newline after the
 * seed's end line, and the library's `fmtCreds` ends right there, so a reader that trims the
 * file (or a password file read without its last newline) would break it; this one survives.
 */
export function credsOf(jwt: string, seed: string): string {
  return [
    "-----BEGIN NATS USER JWT-----",
    jwt,
    "------END NATS USER JWT------",
    "",
    "************************* IMPORTANT *************************",
    "NKEY Seed printed below can be used to sign and prove identity.",
    "NKEYs are sensitive and should be treated as secrets.",
    "",
    "-----BEGIN USER NKEY SEED-----",
    seed,
    "------END USER NKEY SEED------",
    "",
    "*************************************************************",
    "",
  ].join("\n");
}

/** A fresh user nkey seed (`SU…`): every generation of an identity is a key of its own. */
export function newUserSeed(): string {
  return seedOf(createUser());
}

/**
 * The account JWT `accountJwt` re-signed by the operator's signing key with `revocations` as
 * its revocation list; every other claim (limits, signing keys, exports) is kept as it is.
 */
export async function withRevocations(accountJwt: string, operatorSigningSeed: string, revocations: RevocationList): Promise<string> {
  const claims = claimsOf<Account>(accountJwt);
  const account: Partial<Account> = { ...claims.nats };
  delete (account as { type?: unknown }).type;
  delete (account as { version?: unknown }).version;
  account.revocations = revocations;
  if (Object.keys(revocations).length === 0) delete account.revocations;
  return encodeAccount(claims.name, claims.sub, account, { algorithm: Algorithms.v2, signer: signer(operatorSigningSeed) });
}

/**
 * The claims of a JWT, parsed and not verified (the library's `decode` verifies the signature
 * in JavaScript, ~10 ms each): for JWTs the mesh issued itself or read from its server.
 */
function claimsOf<T>(jwt: string): ClaimsData<T> {
  const payload = jwt.split(".")[1];
  if (!payload) throw new Error("not a JWT");
  return JSON.parse(Buffer.from(payload, "base64url").toString("utf8")) as ClaimsData<T>;
}

/** The claims of an account JWT (not verified: it came from the server). */
export function accountClaims(accountJwt: string): { name: string; subject: string; issuedAt: number; signingKeys: string[]; revocations: RevocationList } {
  const c = claimsOf<Account>(accountJwt);
  const signingKeys = (c.nats.signing_keys ?? []).map((k) => (typeof k === "string" ? k : k.key));
  return { name: c.name, subject: c.sub, issuedAt: c.iat, signingKeys, revocations: { ...(c.nats.revocations ?? {}) } };
}

/** The public key, expiry and permissions of a user JWT (not verified). */
export function userClaims(jwt: string): {
  subject: string;
  issuer: string;
  expiresAt?: number;
  name: string;
  publish: string[];
  subscribe: string[];
  denyPublish: string[];
  denySubscribe: string[];
  /** The response permission, if any: how many answers per request, and for how long (ms). */
  responses?: { max: number; ttlMs: number };
} {
  type List = { allow?: string[]; deny?: string[] };
  const c = claimsOf<{ pub?: List; sub?: List; resp?: { max?: number; ttl?: number } }>(jwt);
  const pub = c.nats.pub?.allow ?? [];
  const sub = c.nats.sub?.allow ?? [];
  const resp = c.nats.resp;
  return {
    subject: c.sub,
    issuer: c.iss,
    name: c.name,
    publish: pub,
    subscribe: sub,
    // A user allowed nothing is written as a deny of everything: no deny list of its own.
    denyPublish: pub.length ? (c.nats.pub?.deny ?? []) : [],
    denySubscribe: sub.length ? (c.nats.sub?.deny ?? []) : [],
    ...(resp ? { responses: { max: resp.max ?? 0, ttlMs: Math.round((resp.ttl ?? 0) / 1_000_000) } } : {}),
    ...(c.exp ? { expiresAt: c.exp } : {}),
  };
}

/** The JWT inside a decorated `.creds` file, or undefined when `creds` is none. */
export function jwtOfCreds(creds: string): string | undefined {
  return /-----BEGIN NATS USER JWT-----\s*\n\s*(\S+)\s*\n/.exec(creds)?.[1];
}

/** True when `s` looks like a decorated `.creds` file (a user JWT and an nkey seed). */
export const isCreds = (s: string) => jwtOfCreds(s) !== undefined && /-----BEGIN USER NKEY SEED-----/.test(s);

/** The additional data the signing keys are sealed with, so they open as nothing else. */
const SIGNING_KEYS_AAD = "mesh nats signing keys";

/** The signing keys, encrypted under the master key, as the file that holds them. */
export function sealSigningKeys(mk: MasterKey, keys: SigningKeys): string {
  return `${JSON.stringify({ mesh: SIGNING_KEYS_AAD, sealed: encrypt(mk, JSON.stringify(keys), SIGNING_KEYS_AAD) }, null, 2)}\n`;
}

/** Opens what {@link sealSigningKeys} wrote; throws an Error saying why it cannot. */
export function openSigningKeys(mk: MasterKey, fileText: string): SigningKeys {
  const parsed = JSON.parse(fileText) as { mesh?: string; sealed?: Encrypted };
  if (parsed?.mesh !== SIGNING_KEYS_AAD || !parsed.sealed) throw new Error("it is not a file of the mesh's NATS signing keys");
  const keys = JSON.parse(decrypt(mk, parsed.sealed, SIGNING_KEYS_AAD)) as Partial<SigningKeys>;
  for (const k of ["operatorSigningSeed", "account", "accountSigningSeed", "systemAccount", "systemUserCreds"] as const) {
    if (typeof keys[k] !== "string" || !keys[k]) throw new Error(`it lacks ${k}`);
  }
  return keys as SigningKeys;
}
