/**
 * The example application's options, from its environment (the names in README.md). Each has a
 * default that fits `meshctl up` on one machine, so only the NATS address and identity need
 * saying there.
 */

/** What the application runs as, and how hard it queries. */
export interface AppOptions {
  /** `NATS_URL`, comma-separated; default nats://127.0.0.1:4222. */
  natsUrl: string;
  /** `MESH_NATS_CREDENTIALS`: a `.creds` file to connect with (`meshctl up`'s admin: .mesh/nats-operator/admin.creds); none on a server without authentication. */
  credsFile?: string;
  /** `APP_MODULE`, the module it declares; default `example-app`. */
  module: string;
  /** `APP_PART`; default `api`. */
  part: string;
  /** `APP_NODE`, the node the part is placed on; default `node-a`. */
  node: string;
  /** `APP_REQUIREMENT`, the name of its database requirement; default `db`. */
  requirement: string;
  /** `APP_INSTANCE`, this instance's name among the part's; default a random one (the SDK's). */
  instance?: string;
  /** `APP_QUERY_EVERY_MS`, between two queries of the load; default 5. */
  queryEveryMs: number;
  /** `APP_STATUS_EVERY_MS`, between two status lines; default 5,000. */
  statusEveryMs: number;
  /** `APP_POOL_MAX`, connections per pool; default 4. */
  poolMax: number;
}

/** The options `env` gives; throws naming the variable whose value is not a positive number. */
export function appOptions(env: NodeJS.ProcessEnv): AppOptions {
  const positive = (name: string, fallback: number): number => {
    const raw = env[name];
    if (raw === undefined || raw === "") return fallback;
    const n = Number(raw);
    if (!Number.isFinite(n) || n <= 0) throw new Error(`${name}=${raw} is not a positive number of ${name.endsWith("_MS") ? "milliseconds" : "connections"}`);
    return n;
  };
  return {
    natsUrl: env.NATS_URL || "nats://127.0.0.1:4222",
    ...(env.MESH_NATS_CREDENTIALS ? { credsFile: env.MESH_NATS_CREDENTIALS } : {}),
    module: env.APP_MODULE || "example-app",
    part: env.APP_PART || "api",
    node: env.APP_NODE || "node-a",
    requirement: env.APP_REQUIREMENT || "db",
    ...(env.APP_INSTANCE ? { instance: env.APP_INSTANCE } : {}),
    queryEveryMs: positive("APP_QUERY_EVERY_MS", 5),
    statusEveryMs: positive("APP_STATUS_EVERY_MS", 5_000),
    poolMax: positive("APP_POOL_MAX", 4),
  };
}
