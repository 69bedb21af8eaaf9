/**
 * An application holding one credential with the SDK, in a process of its own, with its own
 * tracer provider (as an application would set one up: the SDK brings none, it only uses
 * `@opentelemetry/api`), exporting over OTLP/HTTP to `OTEL_EXPORTER_OTLP_ENDPOINT`.
 *
 *     tsx traced-holder.ts   (env: NATS_URL, HOLD_MODULE, HOLD_REQUIREMENT, HOLD_NODE, HOLD_PART, HOLD_INSTANCE)
 *
 * Prints `generation <n>` for each generation it holds and `confirmed <n>` once it confirmed a
 * rotation's; on SIGTERM stops holding, flushes its spans and exits 0.
 */
import { connect } from "@nats-io/transport-node";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { BasicTracerProvider, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { holdCredential, registerTracing } from "@mesh/client";

const env = (name: string): string => {
  const v = process.env[name];
  if (!v) throw new Error(`traced-holder: ${name} is not set`);
  return v;
};

const provider = new BasicTracerProvider({
  resource: resourceFromAttributes({ "service.name": process.env.OTEL_SERVICE_NAME ?? "traced-holder" }),
  spanProcessors: [new SimpleSpanProcessor(new OTLPTraceExporter({ url: `${env("OTEL_EXPORTER_OTLP_ENDPOINT")}/v1/traces` }))],
});
registerTracing(provider, new W3CTraceContextPropagator());

const nc = await connect({ servers: env("NATS_URL"), maxReconnectAttempts: -1 });
const holder = await holdCredential(nc, {
  module: env("HOLD_MODULE"),
  requirement: env("HOLD_REQUIREMENT"),
  node: env("HOLD_NODE"),
  part: env("HOLD_PART"),
  instance: env("HOLD_INSTANCE"),
});
process.on("SIGTERM", () => {
  void (async () => {
    await holder.stop();
    await nc.drain();
    await provider.shutdown();
    process.exit(0);
  })();
});
for await (const c of holder) {
  process.stdout.write(`generation ${c.generation}\n`);
  if (c.rotation) {
    await c.confirm();
    process.stdout.write(`confirmed ${c.generation}\n`);
  }
}
