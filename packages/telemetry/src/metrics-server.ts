/**
 * Metrics and health of a mesh process over HTTP, when `MESH_METRICS_LISTEN` (`HOST:PORT`, port 0
 * for any free one) is set:
 *
 * - `GET /metrics`: every instrument the process's code made through `@opentelemetry/api`
 *   (@mesh/shared's metrics.ts names them), in the Prometheus text format, by the official
 *   Prometheus exporter, with the process's resource (`service.name`, …) as `target_info`;
 * - `GET /healthz` (liveness): 200 while the process runs and its NATS connection is not closed
 *   for good (a process whose connection closed exits anyway: runService);
 * - `GET /readyz` (readiness): 200 once the service has started, while its NATS connection is up
 *   and it is not stopping; 503 naming which is not so.
 *
 * Nothing here is secret: metric attributes carry endpoints, kinds, outcomes and error codes,
 * never a name of what the mesh holds (metrics.ts). The listener has no authentication: bind it
 * to loopback or a network only the scraper reaches (docs/security.md). Without the variable
 * nothing is started, nothing is loaded, and every instrument is the API's no-op.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { errorMessage, hostForUrl, parseHostPort } from "@mesh/shared";
import { registerMetrics } from "@mesh/shared/runtime";
import { resourceAttributes } from "./start-tracing.js";

/** What a process says of itself for `/healthz` and `/readyz`: undefined when fine, else why not. */
export interface HealthState {
  notLive(): string | undefined;
  notReady(): string | undefined;
}

export interface MetricsServer {
  /** Where it listens (`http://host:port`). */
  url: string;
  stop(): Promise<void>;
}

/** The address `MESH_METRICS_LISTEN` names; undefined when it is not set; throws, saying what is wrong, when it is not `HOST:PORT`. */
export function metricsListen(env: NodeJS.ProcessEnv): { host: string; port: number } | undefined {
  const spec = env.MESH_METRICS_LISTEN?.trim();
  if (!spec) return undefined;
  const a = parseHostPort(spec);
  if (!a) throw new Error(`MESH_METRICS_LISTEN=${JSON.stringify(spec)} is not HOST:PORT (127.0.0.1:9464, [::1]:9464; port 0 for any free one)`);
  return a;
}

/**
 * Starts the metrics and health listener of process `service` (at `version`) when `env` names
 * one; registers the meter provider first, so instruments made afterwards record. Undefined when
 * `MESH_METRICS_LISTEN` is not set.
 */
export async function startMetricsServer(
  service: string,
  version: string | undefined,
  health: HealthState,
  env: NodeJS.ProcessEnv = process.env,
): Promise<MetricsServer | undefined> {
  const listen = metricsListen(env);
  if (!listen) return undefined;
  // Loaded only when asked for, as the tracing SDK is.
  const [{ MeterProvider }, { PrometheusExporter }, { resourceFromAttributes }] = await Promise.all([
    import("@opentelemetry/sdk-metrics"),
    import("@opentelemetry/exporter-prometheus"),
    import("@opentelemetry/resources"),
  ]);
  const exporter = new PrometheusExporter({ preventServerStart: true });
  const provider = new MeterProvider({ resource: resourceFromAttributes(resourceAttributes(service, version, env)), readers: [exporter] });
  registerMetrics(provider);
  const say = (res: ServerResponse, status: number, text: string) => {
    res.writeHead(status, { "content-type": "text/plain; charset=utf-8", "cache-control": "no-store" });
    res.end(`${text}\n`);
  };
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const path = (req.url ?? "/").split("?")[0];
    if (req.method !== "GET" && req.method !== "HEAD") return say(res, 405, "only GET and HEAD are served here");
    if (path === "/metrics") return exporter.getMetricsRequestHandler(req, res);
    if (path === "/healthz") {
      const why = health.notLive();
      return why ? say(res, 503, `not live: ${why}`) : say(res, 200, "ok");
    }
    if (path === "/readyz") {
      const why = health.notReady();
      return why ? say(res, 503, `not ready: ${why}`) : say(res, 200, "ok");
    }
    say(res, 404, "not found: this listener serves /metrics, /healthz and /readyz");
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", (e) =>
      reject(new Error(`cannot listen on MESH_METRICS_LISTEN=${env.MESH_METRICS_LISTEN} (${errorMessage(e)}): choose a free port or another address`)),
    );
    server.listen(listen.port, listen.host, () => resolve());
  });
  const address = server.address();
  const port = typeof address === "object" && address ? address.port : listen.port;
  return {
    url: `http://${hostForUrl(listen.host)}:${port}`,
    async stop() {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      // A scraper's kept-alive connection would hold close() open.
      server.closeAllConnections();
      await closed;
      await provider.shutdown().catch(() => undefined);
    },
  };
}
