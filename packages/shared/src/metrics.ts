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
import { metrics, type Attributes, type Counter, type Histogram, type Meter, type MeterProvider } from "@opentelemetry/api";

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
  /** Checks of a grant at its provider: `mesh.kind`, `mesh.result` (`verified`, `failed`), `mesh.reason` (the check's reason when it failed). */
  verifications: "mesh.verifications",
  /** Repairs the verifier made: `mesh.kind`, `mesh.action`, `mesh.outcome` (`repaired`, `unverified`, `failed`). */
  repairs: "mesh.repairs",
  /** Generations the provisioner made at their provider: `mesh.kind`, `mesh.outcome` (`ok`, `error`), `mesh.error.code`. */
  provisionings: "mesh.provisionings",
  /** How long making a generation at its provider took, in seconds: `mesh.kind`. */
  provisioningDuration: "mesh.provisioning.duration",
  /** Grants now (a gauge of the store, see {@link observeStore}): `mesh.kind`, `mesh.provider`, `mesh.condition`, `mesh.status`. */
  grants: "mesh.grants",
  /** Modules now, by `mesh.state` (`Ready`, `Pending`, `NothingRequired`, …; `NeverProcessed` has no record and is not counted). */
  modules: "mesh.modules",
  /** Holders that have not confirmed the running rotations yet, by `mesh.kind`. */
  holdersPending: "mesh.rotation.holders.pending",
  /** The oldest current generation of each kind, in seconds since it was first delivered: `mesh.kind`. */
  credentialAge: "mesh.credential.age",
  /** Seconds since each node's agent last reported: `mesh.node`. */
  agentReportAge: "mesh.agent.report.age",
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

/** What `make` makes, made on its first use (see the file comment) and kept. */
function lazily<T>(make: () => T): () => T {
  let made: T | undefined;
  return () => (made ??= make());
}

/** A counter and a duration histogram (seconds), made together on first use. */
function countAndDuration(
  count: { name: string; description: string },
  duration: { name: string; description: string },
): () => { count: Counter; duration: Histogram } {
  return lazily(() => ({
    count: meter().createCounter(count.name, { description: count.description }),
    duration: meter().createHistogram(duration.name, { description: duration.description, unit: "s", advice: { explicitBucketBoundaries: SECONDS_BUCKETS } }),
  }));
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

const verifications = lazily(() => ({
  checks: meter().createCounter(MetricNames.verifications, { description: "Checks of grants at their providers, by kind and result" }),
  repairs: meter().createCounter(MetricNames.repairs, { description: "Repairs the verifier made, by kind, action and outcome" }),
}));

/** Records one check of a `kind` grant at its provider: verified, or failed for `reason`. */
export function recordVerification(kind: string, ok: boolean, reason?: string): void {
  verifications().checks.add(1, { "mesh.kind": kind, "mesh.result": ok ? "verified" : "failed", ...(ok ? {} : { "mesh.reason": reason ?? "Unknown" }) });
}

/** Records one repair of a `kind` grant. */
export function recordRepair(kind: string, action: string, outcome: string): void {
  verifications().repairs.add(1, { "mesh.kind": kind, "mesh.action": action, "mesh.outcome": outcome });
}

const provisionings = countAndDuration(
  { name: MetricNames.provisionings, description: "Generations the provisioner made at their provider, by kind and outcome" },
  { name: MetricNames.provisioningDuration, description: "How long making a generation at its provider took" },
);

/** Records one generation of a `kind` grant made at its provider in `seconds`, or failed with `errorCode`. */
export function recordProvisioning(kind: string, seconds: number, errorCode?: string): void {
  const { count, duration } = provisionings();
  count.add(1, { "mesh.kind": kind, "mesh.outcome": errorCode ? "error" : "ok", ...(errorCode ? { "mesh.error.code": errorCode } : {}) });
  if (!errorCode) duration.record(seconds, { "mesh.kind": kind });
}

/** One value of a gauge of the store, with its attributes. */
export interface GaugeValue {
  value: number;
  attributes: Attributes;
}

/** The store's gauges at one moment ({@link observeStore}), by metric name. */
export type StoreGauges = Partial<Record<"grants" | "modules" | "holdersPending" | "credentialAge" | "agentReportAge", GaugeValue[]>>;

const STORE_GAUGES = {
  grants: { unit: "{grant}", description: "Grants in the store, by kind, provider and condition" },
  modules: { unit: "{module}", description: "Modules in the store, by state" },
  holdersPending: { unit: "{holder}", description: "Holders that have not confirmed the running rotations yet" },
  credentialAge: { unit: "s", description: "The oldest current generation of each kind, since it was first delivered" },
  agentReportAge: { unit: "s", description: "Seconds since each node's agent last reported" },
} as const satisfies Record<keyof StoreGauges, { unit: string; description: string }>;

/**
 * Observes the store's gauges through `read`, at each collection (a scrape): what it returns
 * now, nothing when it returns undefined. The store is one for every instance, so only one
 * instance of the mesh may report it (the verifier that owns the key `store-gauges` in its
 * membership): `read` returns undefined on every other, and a gauge is counted once.
 */
export function observeStore(read: () => StoreGauges | undefined): void {
  const m = meter();
  const gauges = Object.fromEntries(
    (Object.keys(STORE_GAUGES) as Array<keyof StoreGauges>).map((k) => [k, m.createObservableGauge(MetricNames[k], STORE_GAUGES[k])]),
  ) as Record<keyof StoreGauges, ReturnType<Meter["createObservableGauge"]>>;
  m.addBatchObservableCallback((result) => {
    const now = read();
    if (!now) return;
    for (const k of Object.keys(gauges) as Array<keyof StoreGauges>) for (const v of now[k] ?? []) result.observe(gauges[k], v.value, v.attributes);
  }, Object.values(gauges));
}
