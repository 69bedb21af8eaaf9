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
  /**
   * The workload identity of one installed part on the mesh's own NATS (part-identity.ts):
   * never declared by a module, each part gets one from the mesh, served by the provider of the
   * mesh's bus (`mesh-nats`).
   */
  MeshIdentity: "mesh.identity",
} as const;
export type Kind = (typeof Kinds)[keyof typeof Kinds];
export const KIND_LIST = Object.values(Kinds) as [Kind, ...Kind[]];

/**
 * The kinds a NATS server serves. Their adapters take an admin password that is a `.creds` as a
 * `.creds`: the server's nonce is signed with its seed, which is never sent.
 */
export const NATS_KINDS: readonly Kind[] = [Kinds.NatsUser, Kinds.KvBucket, Kinds.ObjectStore, Kinds.MeshIdentity];

/** The built-in provider of `secret`: it needs no external system and is always installed. */
export const BUILTIN_SECRET_PROVIDER = "builtin-secret";
