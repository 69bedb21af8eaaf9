/**
 * The one logger of every process: pino, JSON lines on stderr, with every field that can
 * carry a secret redacted wherever it appears. Code never logs values; redaction is the net
 * under that rule.
 */
import { pino, type Logger, type LoggerOptions } from "pino";

/** Field names whose values are secrets. */
export const SECRET_FIELDS = ["password", "value", "values", "secret", "token", "uri", "credential", "credentials", "masterKey", "seed", "sealed"] as const;

/** pino redact paths: each secret field at the top level and up to three levels deep. */
export const REDACT_PATHS: string[] = SECRET_FIELDS.flatMap((f) => [f, `*.${f}`, `*.*.${f}`, `*.*.*.${f}`]);

export type { Logger };

/**
 * Creates a logger for a service. `destination` defaults to stderr; tests pass a stream to
 * read what was logged.
 */
export function createLogger(
  service: string,
  opts: { level?: string; destination?: NodeJS.WritableStream; base?: Record<string, unknown> } = {},
): Logger {
  const options: LoggerOptions = {
    level: opts.level ?? process.env.MESH_LOG_LEVEL ?? "info",
    base: { service, pid: process.pid, ...opts.base },
    redact: { paths: REDACT_PATHS, censor: "[redacted]" },
    timestamp: pino.stdTimeFunctions.isoTime,
  };
  return pino(options, (opts.destination ?? pino.destination(2)) as pino.DestinationStream);
}
