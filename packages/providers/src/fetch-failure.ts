/** Why a `fetch` to a server's HTTP API failed, in words for a message, for the adapters that speak HTTP. */
import { errorMessage } from "@mesh/shared";

/** The failure's network cause (`ECONNREFUSED`), or that nothing answered within `timeoutMs`. */
export function fetchFailureCause(e: unknown, timeoutMs: number): string {
  if (e instanceof Error && (e.name === "TimeoutError" || e.name === "AbortError")) return `no answer in ${timeoutMs} ms`;
  const cause = (e as { cause?: { code?: string; message?: string } }).cause;
  return cause?.code ?? cause?.message ?? errorMessage(e);
}
