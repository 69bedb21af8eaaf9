/**
 * The network address of a provider's endpoint, for the agent's reachability probe. Pure.
 */

/** Default ports of the endpoint schemes the mesh knows. */
export const DEFAULT_PORTS: Readonly<Record<string, number>> = {
  postgres: 5432,
  postgresql: 5432,
  mysql: 3306,
  mariadb: 3306,
  redis: 6379,
  rediss: 6379,
  amqp: 5672,
  amqps: 5671,
  nats: 4222,
  tls: 4222,
  http: 80,
  https: 443,
};

/**
 * `{host, port}` of an endpoint URL (`postgres://10.0.0.5:5432`, `redis://[::1]`), or
 * undefined when it names no network address the agent can try (`builtin://secret`, a scheme
 * without a known default port and no port, or not a URL).
 */
export function endpointAddress(endpoint: string): { host: string; port: number } | undefined {
  let url: URL;
  try {
    url = new URL(endpoint);
  } catch {
    return undefined;
  }
  const scheme = url.protocol.replace(/:$/, "");
  const host = url.hostname.replace(/^\[(.*)\]$/, "$1");
  if (!host) return undefined;
  const port = url.port ? Number(url.port) : DEFAULT_PORTS[scheme];
  if (!port) return undefined;
  return { host, port };
}

/** `host:port`, with brackets around an IPv6 host. */
export function formatAddress(a: { host: string; port: number }): string {
  return `${a.host.includes(":") ? `[${a.host}]` : a.host}:${a.port}`;
}
