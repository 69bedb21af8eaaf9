/**
 * Span export for the rotator process: when `OTEL_EXPORTER_OTLP_ENDPOINT` is set, spans are
 * exported over OTLP/HTTP (JSON) to `<endpoint>/v1/traces` and W3C trace context is propagated
 * through NATS headers. Without it, tracing stays the API's no-op.
 */
import { registerTracing } from "@mesh/shared";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { BasicTracerProvider, BatchSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { OtlpJsonExporter } from "./otlp-exporter.js";

/** Registers the tracer provider when OTLP export is configured; `stop()` flushes it. */
export async function startTracing(service: string, env: NodeJS.ProcessEnv = process.env): Promise<{ stop(): Promise<void> }> {
  const endpoint = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ?? (env.OTEL_EXPORTER_OTLP_ENDPOINT ? `${env.OTEL_EXPORTER_OTLP_ENDPOINT.replace(/\/$/, "")}/v1/traces` : undefined);
  if (!endpoint) return { stop: async () => {} };
  const provider = new BasicTracerProvider({ spanProcessors: [new BatchSpanProcessor(new OtlpJsonExporter(endpoint, env.OTEL_SERVICE_NAME ?? service))] });
  registerTracing(provider, new W3CTraceContextPropagator());
  return { stop: () => provider.shutdown() };
}
