/**
 * Socket-level failures, as Node.js and the database drivers report them: the error codes that
 * say a server could not be reached or dropped the connection, as opposed to a server that
 * answered and refused. One list for every adapter that classifies a failure as
 * `ProviderUnreachable`; each adds its own protocol's codes beside it.
 */

/** Node's codes for a server that could not be reached, or a connection that broke. */
export const NETWORK_ERROR_CODES: ReadonlySet<string> = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EPIPE",
]);

/**
 * Whether `e`, or an error it aggregates (a connect to every address of a dual-stack name
 * fails with an `AggregateError` of each), carries one of {@link NETWORK_ERROR_CODES} or of
 * `more` (a driver's own codes).
 */
export function hasNetworkCode(e: unknown, more: ReadonlySet<string> = new Set()): boolean {
  const err = e as { code?: unknown; errors?: unknown } | undefined;
  if (typeof err?.code === "string" && (NETWORK_ERROR_CODES.has(err.code) || more.has(err.code))) return true;
  return Array.isArray(err?.errors) && err.errors.some((x) => hasNetworkCode(x, more));
}
