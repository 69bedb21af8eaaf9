/**
 * A provider document's `endpoint`, parsed the same way for every kind: a URL of one of the
 * kind's schemes, naming a host, with no user or password in it (the admin's belong in
 * `admin:`, and an endpoint is named in error messages, so one with a password is never
 * quoted back). What a path means is the kind's to say.
 */
import { ErrorCodes, MeshError } from "@mesh/shared";
import type { ProviderConfig } from "./adapter.js";

export interface EndpointRule {
  /** The schemes accepted, without the colon (`["postgres", "postgresql"]`). */
  schemes: readonly string[];
  /** An endpoint of this kind, shown in every message: `postgres://127.0.0.1:5432`. */
  example: string;
  /** The port when the URL gives none, by scheme. */
  defaultPort: (scheme: string) => number;
  /** Why a path is refused (`names a vhost; each grant gets a vhost of its own`); left out, a path is kept. */
  refusePath?: string;
}

export interface Endpoint {
  scheme: string;
  /** Without IPv6 brackets. */
  host: string;
  port: number;
  /** The URL's path without its leading `/`, decoded; empty when it has none. */
  path: string;
}

/** `host:port` as a client dials it, with an IPv6 host in brackets. */
export const hostPort = (host: string, port: number) => `${host.includes(":") ? `[${host}]` : host}:${port}`;

/** Parses `provider.endpoint` by `rule`; throws `ProviderMisconfigured` saying what is wrong and giving the example. */
export function parseEndpoint(provider: ProviderConfig, rule: EndpointRule): Endpoint {
  const bad = (why: string, quote = true) =>
    new MeshError(
      ErrorCodes.ProviderMisconfigured,
      `provider ${provider.name}: endpoint ${quote ? `${JSON.stringify(provider.endpoint)} ` : ""}${why}; give one such as ${rule.example}`,
    );
  let url: URL;
  try {
    url = new URL(provider.endpoint);
  } catch {
    // Not quoted: a string that is not a URL may still hold a password.
    throw bad("is not a URL", false);
  }
  if (url.username || url.password) {
    throw bad("holds a user or password, which belong in admin.username and admin.passwordEnv or admin.passwordFile", false);
  }
  const scheme = url.protocol.replace(/:$/, "");
  if (!rule.schemes.includes(scheme)) throw bad(`is not a ${rule.schemes.map((s) => `${s}://`).join(" or ")} URL`);
  if (!url.hostname) throw bad("names no host");
  const path = decodeURIComponent(url.pathname.replace(/^\//, ""));
  if (path && rule.refusePath) throw bad(rule.refusePath);
  return { scheme, host: url.hostname.replace(/^\[(.*)\]$/, "$1"), port: url.port ? Number(url.port) : rule.defaultPort(scheme), path };
}

/** The endpoint of a NATS server (`nats.user`, `kv.bucket`, `object.store`); `tls://` for one that requires TLS. */
export const NATS_ENDPOINT: EndpointRule = { schemes: ["nats", "tls"], example: "nats://127.0.0.1:4222", defaultPort: () => 4222 };

/** The provider option naming the PEM bundle a `tls://` NATS endpoint's certificate is verified against. */
export const NATS_CA_FILE_OPTION = "caFile";

/** The servers of a NATS provider: one URL, or a cluster's, comma-separated. */
export interface NatsEndpoints {
  /** The first server (what a binding's `host` and `port` name). */
  first: Endpoint;
  /** `host:port` of each server, in the order given, as a client's `servers` option takes them. */
  servers: string[];
  /** The same servers as URLs, comma-separated: what `NATS_URL` takes, and a binding's `url` (`tls://` when the servers require TLS). */
  url: string;
  /**
   * For a `tls://` endpoint, what every connection to it is given: the provider's bundle
   * (`options.caFile`, read at each connect, so a bundle that gains an authority is used at
   * once), or the system's authorities without one. Empty for `nats://`.
   */
  tls: { tls?: { caFile?: string; ca?: string } };
  /** The bundle a holder's binding carries as `ca.crt` (`options.caFile`), when there is one. */
  caFile?: string;
}

/**
 * Parses the endpoint of a NATS provider, which may list the servers of a cluster
 * comma-separated (`nats://10.0.0.1:4222,nats://10.0.0.2:4222`); each is checked as
 * {@link parseEndpoint} checks one, so a client given the list fails over between them.
 */
export function parseNatsEndpoints(provider: ProviderConfig): NatsEndpoints {
  const parts = provider.endpoint.split(",").map((s) => s.trim());
  const each = parts.map((endpoint) => parseEndpoint({ ...provider, endpoint }, NATS_ENDPOINT));
  const servers = each.map((e) => hostPort(e.host, e.port));
  const secure = each.some((e) => e.scheme === "tls");
  if (secure && each.some((e) => e.scheme !== "tls")) {
    throw new MeshError(
      ErrorCodes.ProviderMisconfigured,
      `provider ${provider.name}: endpoint mixes nats:// and tls:// servers; the servers of one cluster either all require TLS (tls://) or none does`,
    );
  }
  const caFile = provider.options?.[NATS_CA_FILE_OPTION];
  if (caFile !== undefined && (typeof caFile !== "string" || !secure)) {
    throw new MeshError(
      ErrorCodes.ProviderMisconfigured,
      typeof caFile !== "string"
        ? `provider ${provider.name}: options.${NATS_CA_FILE_OPTION} must be the path of a PEM bundle on the provider's node`
        : `provider ${provider.name}: options.${NATS_CA_FILE_OPTION} is given, but the endpoint is not tls://; name the servers tls://host:port so every connection verifies them`,
    );
  }
  return {
    first: each[0]!,
    servers,
    url: servers.map((s) => `${secure ? "tls" : "nats"}://${s}`).join(","),
    tls: secure ? { tls: caFile ? { caFile } : {} } : {},
    ...(caFile ? { caFile } : {}),
  };
}

/** The servers a NATS binding names: its `url` (a cluster's, comma-separated) when it has one, else `host` and `port`. */
export function bindingServers(b: { url?: string | undefined; uri?: string | undefined; host?: string | undefined; port?: string | undefined }): string[] {
  const list = b.url || b.uri;
  if (list) return list.split(",").map((s) => s.trim().replace(/^(nats|tls):\/\//, ""));
  return [hostPort(b.host ?? "", Number(b.port))];
}
