/**
 * Span export for a mesh process. When `OTEL_EXPORTER_OTLP_ENDPOINT` is set (or
 * `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, taken as given), spans are exported over OTLP/HTTP
 * (JSON, the official exporter) to `<endpoint>/v1/traces`, W3C trace context is propagated
 * through NATS headers, and the active span is tracked across `await` (AsyncLocalStorage), so
 * log lines carry its ids. Without an endpoint, or with `OTEL_SDK_DISABLED=true` or
 * `OTEL_TRACES_EXPORTER=none`, nothing is registered: the API stays its no-op and nothing is
 * sent or logged.
 *
 * The resource: `service.name` (the process's own, e.g. `mesh-agent`), `service.version`,
 * then `OTEL_RESOURCE_ATTRIBUTES` (`key=value,…`, percent-decoded), then `OTEL_SERVICE_NAME`,
 * each winning over what comes before, as the OpenTelemetry SDK specification orders them.
 *
 * Everything is registered through `registerTracing` of @mesh/shared, so the API copy the
 * mesh's packages use sees it (this package's SDK modules bring an older one).
 */
import { registerTracing } from "@mesh/shared/runtime";

/** Tracing as started: `stop()` flushes what is buffered and shuts the exporter down. */
export interface Tracing {
  /** Whether spans are exported (an endpoint is configured). */
  exporting: boolean;
  stop(): Promise<void>;
}

/** Where spans go: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as given, else `<OTEL_EXPORTER_OTLP_ENDPOINT>/v1/traces`; undefined when off. */
export function tracesEndpoint(env: NodeJS.ProcessEnv): string | undefined {
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === "true") return undefined;
  if (
    env.OTEL_TRACES_EXPORTER?.split(",")
      .map((s) => s.trim())
      .includes("none")
  )
    return undefined;
  if (env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) return env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT;
  return env.OTEL_EXPORTER_OTLP_ENDPOINT ? `${env.OTEL_EXPORTER_OTLP_ENDPOINT.replace(/\/$/, "")}/v1/traces` : undefined;
}

/**
 * The resource attributes of process `service` at `version`: see the file comment for the
 * order. An entry of `OTEL_RESOURCE_ATTRIBUTES` without `=` or with a value that is not
 * valid percent-encoding is skipped.
 */
export function resourceAttributes(service: string, version: string | undefined, env: NodeJS.ProcessEnv): Record<string, string> {
  const out: Record<string, string> = { "service.name": service, ...(version ? { "service.version": version } : {}) };
  for (const entry of (env.OTEL_RESOURCE_ATTRIBUTES ?? "").split(",")) {
    const i = entry.indexOf("=");
    if (i <= 0) continue;
    try {
      out[decodeURIComponent(entry.slice(0, i).trim())] = decodeURIComponent(entry.slice(i + 1).trim());
    } catch {
      // not percent-encoding: skipped
    }
  }
  if (env.OTEL_SERVICE_NAME) out["service.name"] = env.OTEL_SERVICE_NAME;
  return out;
}

/** Registers span export for process `service` (at `version`) when configured in `env`; see the file comment. */
export async function startTracing(service: string, env: NodeJS.ProcessEnv = process.env, version?: string): Promise<Tracing> {
  const url = tracesEndpoint(env);
  if (!url) return { exporting: false, stop: async () => {} };
  // Loaded only when spans are exported: the SDK and the exporter are a fifth of a second of
  // CPU at every service's start, which `meshctl up` pays for six services twice.
  const [
    { AsyncLocalStorageContextManager },
    { W3CTraceContextPropagator },
    { resourceFromAttributes },
    { BasicTracerProvider, BatchSpanProcessor },
    { OTLPTraceExporter },
  ] = await Promise.all([
    import("@opentelemetry/context-async-hooks"),
    import("@opentelemetry/core"),
    import("@opentelemetry/resources"),
    import("@opentelemetry/sdk-trace-base"),
    import("@opentelemetry/exporter-trace-otlp-http"),
  ]);
  const provider = new BasicTracerProvider({
    resource: resourceFromAttributes(resourceAttributes(service, version, env)),
    spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter({ url }))],
  });
  registerTracing(provider, new W3CTraceContextPropagator(), new AsyncLocalStorageContextManager());
  return { exporting: true, stop: () => provider.shutdown() };
}
