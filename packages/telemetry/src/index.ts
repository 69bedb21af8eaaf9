/**
 * @mesh/telemetry — span export for the mesh's own processes (OTLP/HTTP, resource from the
 * environment). Not for the SDK: @mesh/client uses only `@opentelemetry/api`, so an
 * application's own tracer provider receives its spans.
 */
export { startTracing, traced, tracesEndpoint, resourceAttributes, type Tracing } from "./start-tracing.js";
