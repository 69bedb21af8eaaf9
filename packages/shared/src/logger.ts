/**
 * The one logger of every process: pino, JSON lines on stderr, with every field that can
 * carry a secret redacted wherever it appears. Code never logs values; redaction is the net
 * under that rule.
 *
 * Errors are logged as errors: `log.warn({ err: e }, "…")` records `err.type`, `err.message`,
 * `err.stack`, the mesh's `err.code` and `err.retryable`, and `err.cause` likewise, through
 * {@link serializeError}. A line logged while a span is active carries its `trace_id`,
 * `span_id` and `trace_flags` (the field names of OpenTelemetry's pino instrumentation).
 */
import { context, trace, type Context } from "@opentelemetry/api";
import { pino, type Logger, type LoggerOptions } from "pino";

/** Field names whose values are secrets. */
export const SECRET_FIELDS = ["password", "value", "values", "secret", "token", "uri", "credential", "credentials", "masterKey", "seed", "sealed"] as const;

/** pino redact paths: each secret field at the top level and up to three levels deep. */
export const REDACT_PATHS: string[] = SECRET_FIELDS.flatMap((f) => [f, `*.${f}`, `*.*.${f}`, `*.*.*.${f}`]);

export type { Logger };

/** What a logged error keeps: a driver's error may carry the statement or command that failed (a password in it), so nothing else. */
export interface SerializedError {
  type: string;
  message: string;
  stack?: string;
  code?: string | number;
  retryable?: boolean;
  cause?: SerializedError | string;
  /** An AggregateError's errors. */
  errors?: Array<SerializedError | string>;
}

const MAX_CAUSE_DEPTH = 5;

/**
 * An error as a log line holds it: type, message, stack, `code`, `retryable` and (to a depth of
 * five) `cause` and an AggregateError's `errors`, and none of its other fields, which for a
 * database driver's error can be the failed statement. A value that is not an Error is kept
 * as it is (a string logged as `err` stays a string).
 */
export function serializeError(e: unknown, depth = 0): unknown {
  if (!(e instanceof Error)) return e;
  const out: SerializedError = { type: e.constructor?.name || e.name, message: e.message };
  if (e.stack) out.stack = e.stack;
  const { code, retryable } = e as { code?: unknown; retryable?: unknown };
  if (typeof code === "string" || typeof code === "number") out.code = code;
  if (typeof retryable === "boolean") out.retryable = retryable;
  if (depth < MAX_CAUSE_DEPTH) {
    if (e.cause !== undefined) out.cause = serializeError(e.cause, depth + 1) as SerializedError | string;
    if (e instanceof AggregateError) out.errors = e.errors.map((x) => serializeError(x, depth + 1) as SerializedError | string);
  }
  return out;
}

/** The ids of the span active in `ctx` (default: now), for every line logged inside it; nothing outside one. */
export function traceFields(ctx: Context = context.active()): Record<string, string> {
  const sc = trace.getSpan(ctx)?.spanContext();
  if (!sc || !trace.isSpanContextValid(sc)) return {};
  return { trace_id: sc.traceId, span_id: sc.spanId, trace_flags: sc.traceFlags.toString(16).padStart(2, "0") };
}

/**
 * Creates a logger for a service. `destination` defaults to stderr; tests pass a stream to
 * read what was logged.
 */
export function createLogger(service: string, opts: { level?: string; destination?: NodeJS.WritableStream; base?: Record<string, unknown> } = {}): Logger {
  const options: LoggerOptions = {
    level: opts.level ?? process.env.MESH_LOG_LEVEL ?? "info",
    base: { service, pid: process.pid, ...opts.base },
    redact: { paths: REDACT_PATHS, censor: "[redacted]" },
    serializers: { err: serializeError },
    mixin: () => traceFields(),
    timestamp: pino.stdTimeFunctions.isoTime,
  };
  return pino(options, (opts.destination ?? pino.destination(2)) as pino.DestinationStream);
}
