/**
 * @mesh/telemetry — span export (OTLP/HTTP, resource from the environment), and metrics and
 * health over HTTP (`MESH_METRICS_LISTEN`), for the mesh's own processes. Not for the SDK:
 * @mesh/client uses only `@opentelemetry/api`, so an application's own providers receive its
 * spans and metrics.
 */
export { startTracing, tracesEndpoint, resourceAttributes, type Tracing } from "./start-tracing.js";
export { metricsListen, startMetricsServer, type HealthState, type MetricsServer } from "./metrics-server.js";
export { observed } from "./observed.js";
