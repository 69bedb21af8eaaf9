/**
 * A requirement's `env`: variables that carry one of its binding's keys under the name an
 * application already reads (`DATABASE_URL: uri`), as ServiceBinding's `.spec.env` does. The
 * agent writes them into the part's env file beside the `<REQUIREMENT>_<KEY>` names, and the
 * SDK hands them with each generation; the binding's directory is unchanged. Pure.
 */
import { createHash } from "node:crypto";
import { Kinds, type Kind } from "./kinds.js";

/** An environment variable name a mapping may give: letters, digits and `_`, not starting with a digit. */
export const ENV_NAME_PATTERN = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** Variable name → binding key. */
export type EnvMapping = Readonly<Record<string, string>>;

const SERVER = ["type", "provider", "host", "port"] as const;
const LOGIN = ["username", "password"] as const;
/** What a registry kind binds when the mesh's own NATS serves it (the control plane's bootstrap registry). */
const BOOTSTRAP_REGISTRY = ["bucket", "uri", "format"] as const;
const NATS_LOGIN = ["uri", "ca.crt", "username", "nkey", "creds", "inboxPrefix"] as const;
/** What a client verifies a server reached over TLS with (provider-tls.ts): the bundle, and the name when it is not `host`. */
const SERVER_CA = ["ca.crt", "servername"] as const;

/**
 * The keys a binding of each kind may carry (docs/reference/bindings.md says what each holds):
 * what a requirement's `env` may name. Every adapter's bindings stay within its kind's list
 * (the conformance tests check it).
 */
export const BINDING_KEYS: Readonly<Record<Kind, readonly string[]>> = {
  // libpq's names for a server reached over verified TLS: sslrootcert holds the bundle, a client names its file.
  [Kinds.PostgresDatabase]: [...SERVER, "database", ...LOGIN, "uri", "sslmode", "sslrootcert", "sslservername"],
  [Kinds.MariadbDatabase]: [...SERVER, "database", ...LOGIN, "uri", ...SERVER_CA],
  [Kinds.RedisUser]: [...SERVER, ...LOGIN, "key-prefix", "uri", ...SERVER_CA],
  [Kinds.RabbitmqVhost]: [...SERVER, "vhost", ...LOGIN, "uri", ...SERVER_CA],
  // The registries check the host their URL names (docker, npm): the bundle alone.
  [Kinds.OciRegistry]: [...SERVER, "registry", "url", "namespace", ...LOGIN, ...BOOTSTRAP_REGISTRY, "ca.crt"],
  [Kinds.NpmRegistry]: [...SERVER, "registry", "scope", ...LOGIN, "auth", "npmrc", ...BOOTSTRAP_REGISTRY, "ca.crt"],
  [Kinds.NatsUser]: [...SERVER, ...NATS_LOGIN],
  // buckets and streams: the control plane's source of record, several buckets in one grant.
  [Kinds.KvBucket]: [...SERVER, "bucket", "uri", "buckets", "streams"],
  [Kinds.ObjectStore]: [...SERVER, "bucket", "uri"],
  [Kinds.Secret]: ["type", "provider", "value"],
  [Kinds.MeshIdentity]: [...SERVER, ...NATS_LOGIN, "url", "grant", "module", "part", "node"],
  // servicebinding.io's TLS layout: the chain, its key and the authority's bundle.
  [Kinds.TlsCertificate]: ["type", "provider", "tls.crt", "tls.key", "ca.crt"],
};

/**
 * A short fingerprint of a mapping, the same for the same pairs in any order; "" for none. A
 * holder's record keeps the one its env file was written with, so that a changed mapping is
 * delivered again without a new generation.
 */
export function envDigest(env: EnvMapping | undefined): string {
  const pairs = Object.entries(env ?? {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  if (pairs.length === 0) return "";
  return createHash("sha256").update(JSON.stringify(pairs)).digest("base64url").slice(0, 16);
}

/**
 * The variables `env` names, with their values from a binding's `values`; `missing` lists the
 * names whose key the binding lacks (none is set for them).
 */
export function mappedEnv(env: EnvMapping | undefined, values: Readonly<Record<string, string>>): { env: Record<string, string>; missing: string[] } {
  const out: Record<string, string> = {};
  const missing: string[] = [];
  for (const [name, key] of Object.entries(env ?? {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    if (Object.hasOwn(values, key)) out[name] = values[key]!;
    else missing.push(name);
  }
  return { env: out, missing };
}
