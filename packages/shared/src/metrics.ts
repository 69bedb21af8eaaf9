/**
 * The mesh's metrics: their names, units and attributes, in one place, and the instruments the
 * services record through `@opentelemetry/api`. Without a meter provider registered (no
 * `MESH_METRICS_LISTEN`: @mesh/telemetry's metrics.ts) every instrument is the API's no-op.
 *
 * The API has no proxy for meters: a meter asked for before a provider is registered stays a
 * no-op. So instruments are made on first use, and a service's main registers the provider
 * before its service starts (@mesh/telemetry's `observed`).
 *
 * Attributes are kept to a few values each (an endpoint, a kind, an outcome, an error code),
 * never a module, grant or holder name: a label per grant would be a series per grant in every
 * scraper, and the names of what the mesh holds are the operator's business, not the scraper's
 * (`meshctl get` says what each grant is doing).
 */
import { metrics, type Counter, type Histogram, type Meter, type MeterProvider } from "@opentelemetry/api";

/** Every metric the mesh records, as OpenTelemetry names them (the Prometheus exporter writes `mesh_requests_total`, `mesh_request_duration_bucket`, …, the unit in `# UNIT`). */
export const MetricNames = {
  /** Requests a service answered on a `mesh.api.…` subject: `mesh.endpoint`, `mesh.outcome` (`ok`, `error`), `mesh.error.code`. */
  requests: "mesh.requests",
  /** How long answering each took, in seconds: `mesh.endpoint`. */
  requestDuration: "mesh.request.duration",
  /** Rotations that reached an end state: `mesh.kind`, `mesh.outcome` (`committed`, `stalled`). */
  rotations: "mesh.rotations",
  /** From the rotate request (or schedule) to the commit, in seconds: `mesh.kind`. */
  rotationDuration: "mesh.rotation.duration",
} as const;

/** Registers `provider` (a MeterProvider of any OpenTelemetry SDK) as the one the mesh's packages record through; false when one was registered already. */
export function registerMetrics(provider: unknown): boolean {
  return metrics.setGlobalMeterProvider(provider as MeterProvider);
}

let meterOf: Meter | undefined;
/** The mesh's meter, asked for on first use (see the file comment). */
function meter(): Meter {
  return (meterOf ??= metrics.getMeter("mesh"));
}

/** Seconds buckets for request and rotation durations: 1 ms to 5 min. */
const SECONDS_BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300];

/** A counter and a duration histogram (seconds), made together on first use. */
function countAndDuration(count: { name: string; description: string }, duration: { name: string; description: string }) {
  let made: { count: Counter; duration: Histogram } | undefined;
  return () =>
    (made ??= {
      count: meter().createCounter(count.name, { description: count.description }),
      duration: meter().createHistogram(duration.name, { description: duration.description, unit: "s", advice: { explicitBucketBoundaries: SECONDS_BUCKETS } }),
    });
}

const requests = countAndDuration(
  { name: MetricNames.requests, description: "Requests a mesh service answered, by endpoint and outcome" },
  { name: MetricNames.requestDuration, description: "How long a mesh service took to answer a request" },
);

/** Records one request answered on endpoint `endpoint` (its subject's name), `errorCode` when it failed. */
export function recordRequest(endpoint: string, seconds: number, errorCode?: string): void {
  const { count, duration } = requests();
  count.add(1, { "mesh.endpoint": endpoint, "mesh.outcome": errorCode ? "error" : "ok", ...(errorCode ? { "mesh.error.code": errorCode } : {}) });
  duration.record(seconds, { "mesh.endpoint": endpoint });
}

const rotations = countAndDuration(
  { name: MetricNames.rotations, description: "Rotations that committed or stalled, by kind" },
  { name: MetricNames.rotationDuration, description: "From a rotation's request to its commit" },
);

/** Records a rotation of a `kind` grant that reached `outcome` `seconds` after it was requested (the duration only for a commit). */
export function recordRotation(kind: string, outcome: "committed" | "stalled", seconds: number): void {
  const { count, duration } = rotations();
  count.add(1, { "mesh.kind": kind, "mesh.outcome": outcome });
  if (outcome === "committed") duration.record(seconds, { "mesh.kind": kind });
}
