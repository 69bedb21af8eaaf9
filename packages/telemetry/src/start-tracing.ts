/**
 * Span export for the rotator process: when `OTEL_EXPORTER_OTLP_ENDPOINT` is set, spans are
 * exported over OTLP/HTTP (the official exporter) to `<endpoint>/v1/traces`, or to
 * `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as given, and W3C trace context is propagated through
 * NATS headers. Without either, tracing stays the API's no-op.
 */
import { registerTracing } from "@mesh/shared";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { BasicTracerProvider, BatchSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http";

/** Registers the tracer provider when OTLP export is configured; `stop()` flushes it. */
export async function startTracing(service: string, env: NodeJS.ProcessEnv = process.env): Promise<{ stop(): Promise<void> }> {
  const endpoint = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ?? (env.OTEL_EXPORTER_OTLP_ENDPOINT ? `${env.OTEL_EXPORTER_OTLP_ENDPOINT.replace(/\/$/, "")}/v1/traces` : undefined);
  if (!endpoint) return { stop: async () => {} };
  const provider = new BasicTracerProvider({
    resource: resourceFromAttributes({ "service.name": env.OTEL_SERVICE_NAME ?? service }),
    spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter({ url: endpoint }))] });
  registerTracing(provider, new W3CTraceContextPropagator());
  return { stop: () => provider.shutdown() };
}
