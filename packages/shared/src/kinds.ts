/**
 * The kinds of resource a requirement can ask for. A kind outside this list is refused at
 * apply time (a typo must not turn into a silent `NoProvider`).
 */
export const Kinds = {
  PostgresDatabase: "postgres.database",
  Secret: "secret",
  MariadbDatabase: "mariadb.database",
  RedisUser: "redis.user",
  RabbitmqVhost: "rabbitmq.vhost",
  NatsUser: "nats.user",
  KvBucket: "kv.bucket",
  ObjectStore: "object.store",
  /** A package scope `@<module>` on an npm registry (Verdaccio with the mesh's auth plugin). */
  NpmRegistry: "npm.registry",
  /**
   * A repository namespace `<module>/…` on an OCI (container image) registry, with a credential
   * that may push and pull there and nowhere else: the CNCF distribution registry with token
   * authentication, the mesh's token issuer (services/oci-token-issuer) granting per repository.
   */
  OciRegistry: "oci.registry",
  /**
   * The workload identity of one installed part on the mesh's own NATS (part-identity.ts):
   * never declared by a module, each part gets one from the mesh, served by the provider of the
   * mesh's bus (`mesh-nats`).
   */
  MeshIdentity: "mesh.identity",
  /**
   * An X.509 certificate and its key for the requirement's parts (DNS names and IP addresses,
   * a lifetime, server or client use), issued by the mesh's own certificate authority
   * (provider `mesh-ca`, mesh-ca.ts) and renewed through the ordinary rotation before it expires.
   */
  TlsCertificate: "tls.certificate",
} as const;
export type Kind = (typeof Kinds)[keyof typeof Kinds];
export const KIND_LIST = Object.values(Kinds) as [Kind, ...Kind[]];

/**
 * The kinds a NATS server serves. Their adapters take an admin password that is a `.creds` as a
 * `.creds`: the server's nonce is signed with its seed, which is never sent.
 */
export const NATS_KINDS: readonly Kind[] = [Kinds.NatsUser, Kinds.KvBucket, Kinds.ObjectStore, Kinds.MeshIdentity];

/**
 * The registry kinds, which a NATS server also serves, from a JetStream object store, when the
 * provider's endpoint is `nats://` or `tls://` (the bootstrap registry of the control plane: the mesh's own
 * NATS serves them to module `mesh` only, see control-plane.ts); a registry server serves them
 * over HTTP otherwise.
 */
export const REGISTRY_KINDS: readonly Kind[] = [Kinds.OciRegistry, Kinds.NpmRegistry];

/** True when a provider at `endpoint` serves `kind` through NATS (its adapter takes a `.creds` admin password as a `.creds`). */
export function servedByNats(kind: Kind, endpoint: string): boolean {
  return NATS_KINDS.includes(kind) || (REGISTRY_KINDS.includes(kind) && /^(nats|tls):\/\//i.test(endpoint));
}

/**
 * The kinds whose adapter reaches its server over TLS when the provider says `tls:` (every
 * connection verifying the server's certificate); a provider of any other kind that says it is
 * refused, never served in plain text.
 */
export const TLS_PROVIDER_KINDS: readonly Kind[] = [
  Kinds.PostgresDatabase,
  Kinds.MariadbDatabase,
  Kinds.RedisUser,
  Kinds.RabbitmqVhost,
  Kinds.OciRegistry,
  Kinds.NpmRegistry,
];

/**
 * The kinds whose resource holds data (a database, a vhost, a bucket, an object store): when no
 * installed part needs such a grant any more its logins are revoked and, by default
 * (`deletionPolicy: Retain`), the data is kept. Every other kind is a credential alone, and is
 * always deleted.
 */
export const DATA_KINDS: readonly Kind[] = [Kinds.PostgresDatabase, Kinds.MariadbDatabase, Kinds.RabbitmqVhost, Kinds.KvBucket, Kinds.ObjectStore];

/** What happens to a grant's resource once nothing needs it: `Retain` keeps the data (its logins are revoked), `Delete` drops it. */
export type DeletionPolicy = "Retain" | "Delete";

/** The policy that applies to a requirement of `kind` that says `declared` (or nothing): a credential-only kind is always deleted. */
export function deletionPolicyOf(kind: Kind, declared: DeletionPolicy | undefined): DeletionPolicy {
  if (!DATA_KINDS.includes(kind)) return "Delete";
  return declared ?? "Retain";
}

/**
 * The kinds whose generations cannot be disabled before they expire: a retired or taken-back
 * certificate stays valid until its `notAfter` (the grant's `resource.expires`); a short
 * lifetime is their revocation.
 */
export const SELF_EXPIRING_KINDS: readonly Kind[] = [Kinds.TlsCertificate];

/** The provider of `tls.certificate` that `meshctl up` and `meshctl bootstrap` register: the mesh's own certificate authority. */
export const MESH_CA_PROVIDER = "mesh-ca";

/** The built-in provider of `secret`: it needs no external system and is always installed. */
export const BUILTIN_SECRET_PROVIDER = "builtin-secret";
