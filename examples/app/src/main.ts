#!/usr/bin/env node
/**
 * The example application as a program: its options from the environment (app-options.ts),
 * span export set up as the mesh's own services set it up (OTLP/HTTP when
 * `OTEL_EXPORTER_OTLP_ENDPOINT` is set, through @mesh/telemetry), its lines as JSON on stdout.
 * SIGTERM or SIGINT stops the load, lets its queries finish, prints the last counts, flushes
 * the spans and exits 0.
 */
import { startTracing } from "@mesh/telemetry";
import { appOptions } from "./app-options.js";
import { startApp, type AppLine } from "./app.js";

// Written whole and at once: on a pipe Node.js writes synchronously, so a line is out before what it announces happens.
const print = (line: AppLine) => process.stdout.write(`${JSON.stringify({ time: new Date().toISOString(), ...line })}\n`);

const options = appOptions(process.env);
const tracing = await startTracing("example-app", process.env);
const app = await startApp(options, print).catch(async (e: unknown) => {
  await tracing.stop();
  throw e;
});
let stopping = false;
const stop = () => {
  if (stopping) return;
  stopping = true;
  void app
    .stop()
    .finally(() => tracing.stop())
    .then(
      () => process.exit(0),
      (e: unknown) => {
        process.stderr.write(`example-app: stopping failed: ${e instanceof Error ? e.message : String(e)}\n`);
        process.exit(1);
      },
    );
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
