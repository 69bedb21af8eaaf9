/**
 * Bounds on what comes into the mesh from documents, requests and the command line: one place
 * for every number, each listed in docs/security.md ("Limits") and tested at its value and one
 * past it. A value past a limit is refused with a message that names the limit; nothing is
 * truncated silently.
 */

/**
 * The longest delay a Node.js timer keeps: a `setTimeout` past 2^31−1 ms (about 24.8 days)
 * fires at once. Every duration that becomes a timer (`verify.every`, a rotation's deadline,
 * the services' intervals, meshctl's deadlines) is refused past it.
 */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** The longest `rotate: { every }`: it is compared with timestamps, not set as a timer; ten years. */
export const MAX_ROTATE_EVERY_MS = 3_650 * 86_400_000;

export const Limits = {
  /** A manifest file (YAML or JSON), in bytes of UTF-8. */
  manifestBytes: 512 * 1024,
  /**
   * One apply request, as the JSON meshctl sends: under NATS's default `max_payload` (1 MiB),
   * which would refuse a larger message with a bare "maximum payload exceeded".
   */
  applyRequestBytes: 900 * 1024,
  /** Documents in one file, and in one apply request. */
  documents: 256,
  /**
   * Alias expansions in one YAML document, as the yaml library counts them (`maxAliasCount`: per
   * anchor, its resolutions times the aliases inside it): more is the shape of an alias bomb
   * ("billion laughs"), refused before it is expanded.
   */
  yamlAliases: 100,
  /** Parts of one module. */
  parts: 64,
  /** Requirements of one module. */
  requirements: 128,
  /** Parts named by one requirement. */
  requirementParts: 64,
  /** Kinds one provider serves. */
  serves: 16,
  /** Grants one provider needs. */
  needs: 32,
  /** Options of one requirement or provider. */
  options: 32,
  /** Items of one list option of a requirement (a `nats.user`'s subjects…). */
  optionItems: 256,
  /** One option value, and each item of a list option, in characters. */
  optionChars: 4_096,
  /** A provider's endpoint URL, in characters. */
  endpointChars: 2_048,
  /** A path (an admin `passwordFile`), in characters: Linux's PATH_MAX. */
  pathChars: 4_096,
  /**
   * Requests one service instance works on at once, per subject it serves (`serveJson`): one
   * more is answered at once with a retryable `Unavailable`. Above the thousands of holders a
   * rotation fetches for at once, far below what exhausts a service's memory.
   */
  requestsInFlight: 8_192,
} as const;

/** `n` bytes in the largest unit that keeps it whole or short: `512 KiB`, `1.5 MiB`. */
export function formatBytes(n: number): string {
  if (n < 1024) return `${n} bytes`;
  if (n < 1024 * 1024) return `${Math.round((n / 1024) * 10) / 10} KiB`;
  return `${Math.round((n / 1024 / 1024) * 10) / 10} MiB`;
}
