/**
 * Which adapter serves which kind: the one place a kind is mapped to its adapter factory.
 */
import { ErrorCodes, Kinds, MeshError, TLS_PROVIDER_KINDS, servedByNats, type Kind } from "@mesh/shared";
import type { AdapterFactory, ProviderAdapter, ProviderConfig } from "./adapter.js";
import { createPostgresAdapter } from "./postgres.js";
import { createSecretAdapter } from "./secret.js";
import { createMariadbAdapter } from "./mariadb.js";
import { createRedisAdapter } from "./redis.js";
import { createMeshIdentityAdapter, createNatsUserAdapter } from "./nats-user.js";
import { createRabbitmqAdapter } from "./rabbitmq.js";
import { createOciRegistryAdapter } from "./oci-registry.js";
import { createBootstrapNpmRegistryAdapter, createBootstrapOciRegistryAdapter, createKvBucketAdapter, createObjectStoreAdapter } from "./jetstream-stores.js";
import { createNpmRegistryAdapter } from "./npm-registry.js";
import { createMeshCaAdapter } from "./tls-certificate.js";

const factories: Partial<Record<Kind, AdapterFactory>> = {
  [Kinds.Secret]: createSecretAdapter,
  [Kinds.PostgresDatabase]: createPostgresAdapter,
  [Kinds.MariadbDatabase]: createMariadbAdapter,
  [Kinds.RedisUser]: createRedisAdapter,
  [Kinds.RabbitmqVhost]: createRabbitmqAdapter,
  [Kinds.OciRegistry]: createOciRegistryAdapter,
  [Kinds.NatsUser]: createNatsUserAdapter,
  [Kinds.MeshIdentity]: createMeshIdentityAdapter,
  [Kinds.KvBucket]: createKvBucketAdapter,
  [Kinds.ObjectStore]: createObjectStoreAdapter,
  [Kinds.NpmRegistry]: createNpmRegistryAdapter,
  [Kinds.TlsCertificate]: createMeshCaAdapter,
};

/**
 * The adapters of kinds a NATS provider serves instead of the kind's own server (kinds.ts
 * `servedByNats`): the registry kinds on the mesh's NATS are the bootstrap registry.
 */
const natsFactories: Partial<Record<Kind, AdapterFactory>> = {
  [Kinds.OciRegistry]: createBootstrapOciRegistryAdapter,
  [Kinds.NpmRegistry]: createBootstrapNpmRegistryAdapter,
};

/** The kinds that have an adapter, in a stable order. */
export const adapterKinds: readonly Kind[] = [...new Set([...Object.keys(factories), ...Object.keys(natsFactories)])].sort() as Kind[];

/** True when `kind` has an adapter (on some provider). */
export function hasAdapter(kind: string): kind is Kind {
  return Object.hasOwn(factories, kind) || Object.hasOwn(natsFactories, kind);
}

/**
 * Makes the adapter for `kind` on `provider`. Throws MeshError `ProviderMisconfigured` (not
 * retryable) for a kind without an adapter, naming the kinds that have one, and whatever the
 * factory throws for a provider it cannot use (a malformed endpoint).
 */
export function createAdapter(kind: string, provider: ProviderConfig): ProviderAdapter {
  const onNats = hasAdapter(kind) && servedByNats(kind, provider.endpoint) ? natsFactories[kind] : undefined;
  const factory = onNats ?? (hasAdapter(kind) ? factories[kind] : undefined);
  if (!factory) {
    throw new MeshError(
      ErrorCodes.ProviderMisconfigured,
      `provider ${provider.name} serves ${JSON.stringify(kind)}, but this mesh has no adapter for that kind yet; kinds with an adapter: ${adapterKinds.join(", ")}`,
    );
  }
  // Never served in plain text when the provider says its server speaks TLS (the schema refuses such a document too).
  if (provider.tls && (onNats || !TLS_PROVIDER_KINDS.includes(kind as Kind))) {
    throw new MeshError(
      ErrorCodes.ProviderMisconfigured,
      onNats
        ? `provider ${provider.name} says tls, but it serves ${kind} from NATS, whose servers are verified through the endpoint: name them tls://host:port, give options.caFile, and leave tls out`
        : `provider ${provider.name} says tls, but the mesh reaches no server of ${kind} that it could verify; leave tls out of that provider (kinds that verify it: ${TLS_PROVIDER_KINDS.join(", ")})`,
    );
  }
  return factory(provider);
}
