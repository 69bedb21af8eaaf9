/**
 * What every service's main wraps its start in: `runService(name, observed("mesh-<name>",
 * version, start))`. Before the service starts: tracing (start-tracing.ts) and, with
 * `MESH_METRICS_LISTEN`, the metrics and health listener (metrics-server.ts); after it stops,
 * both are stopped (spans flushed). Readiness follows the service: not ready until its start
 * resolved, while its NATS connection is down, and once it is stopping.
 */
import type { RunningService, ServiceContext } from "@mesh/shared/service";
import { startTracing, tracesEndpoint } from "./start-tracing.js";
import { errorMessage } from "@mesh/shared";
import { metricsListen, startMetricsServer, type HealthState } from "./metrics-server.js";

/** Wraps `start` (see the file comment). A `MESH_METRICS_LISTEN` that is not `HOST:PORT` ends the process at once (exit 2), before it reaches for NATS. */
export function observed(
  service: string,
  version: string | undefined,
  start: (ctx: ServiceContext) => Promise<RunningService>,
  env: NodeJS.ProcessEnv = process.env,
): (ctx: ServiceContext) => Promise<RunningService> {
  try {
    metricsListen(env);
  } catch (e) {
    process.stderr.write(`${service}: ${errorMessage(e)}\n`);
    process.exit(2);
  }
  return async (ctx) => {
    const tracing = await startTracing(service, env, version);
    if (tracing.exporting) ctx.log.info({ endpoint: tracesEndpoint(env) }, `exporting spans over OTLP/HTTP to ${tracesEndpoint(env)}`);
    let phase: "starting" | "running" | "stopping" = "starting";
    let connected = true;
    void (async () => {
      for await (const s of ctx.nc.status()) {
        if (s.type === "disconnect") connected = false;
        else if (s.type === "reconnect") connected = true;
      }
    })().catch(() => undefined);
    const health: HealthState = {
      notLive: () => (ctx.nc.isClosed() ? "its NATS connection is closed" : undefined),
      notReady: () =>
        ctx.nc.isClosed()
          ? "its NATS connection is closed"
          : phase !== "running"
            ? `it is ${phase}`
            : connected
              ? undefined
              : "its NATS connection is down (reconnecting)",
    };
    let metrics: Awaited<ReturnType<typeof startMetricsServer>>;
    try {
      metrics = await startMetricsServer(service, version, health, env);
    } catch (e) {
      await tracing.stop();
      throw e;
    }
    if (metrics) ctx.log.info({ url: metrics.url }, `serving metrics at ${metrics.url}/metrics, liveness at /healthz, readiness at /readyz`);
    const stopAll = async () => {
      await metrics?.stop();
      await tracing.stop();
    };
    let running: RunningService;
    try {
      running = await start(ctx);
    } catch (e) {
      await stopAll();
      throw e;
    }
    phase = "running";
    return {
      ...running,
      async stop() {
        phase = "stopping";
        // Flushed also when the service's stop fails: its spans say what it did before.
        try {
          await running.stop();
        } finally {
          await stopAll();
        }
      },
    };
  };
}
