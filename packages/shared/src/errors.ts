/**
 * Named errors with a stable code, a message that says what to do, a cause, and whether a
 * retry can help. A reply to a bad request carries `{code, message}`, never a timeout.
 */
export const ErrorCodes = {
  InvalidManifest: "InvalidManifest",
  InvalidName: "InvalidName",
  InvalidRequest: "InvalidRequest",
  NotFound: "NotFound",
  /** A module has no state because the resolver has never processed a manifest of it (meshctl exit code 3). */
  NotProcessed: "NotProcessed",
  Conflict: "Conflict",
  /** A request its sender may not make: its body names another module, node or part than the subject the server let it publish on. */
  Forbidden: "Forbidden",
  ProviderUnreachable: "ProviderUnreachable",
  ProviderRejected: "ProviderRejected",
  ProviderMisconfigured: "ProviderMisconfigured",
  MasterKey: "MasterKey",
  Decrypt: "Decrypt",
  /** A part's `onRotate` names a hook that its node's agent was not started with (`--allow-hook`): nothing ran. */
  HookNotAllowed: "HookNotAllowed",
  /** A part's `onRotate` hook ran and failed (exit status, signal, timeout), or could not start. */
  HookFailed: "HookFailed",
  /**
   * A provider's admin password is a mesh secret, and its server accepts another generation of
   * it than the current one (a data directory initialised or restored earlier): what it serves
   * waits until that is repaired (docs/bootstrap.md, "Provider dependencies").
   */
  AdminSecretDiverged: "AdminSecretDiverged",
  /** No instance of the service that answers a request is running (no responders, or a timeout). */
  Unavailable: "Unavailable",
  /**
   * The NATS server runs and JetStream answers, but a stream the mesh made is gone from it while
   * its store on disk is whole (nats-server 2.9.10 after a reload that read its configuration
   * half-written): only a restart of the server brings it back. Not said of a cluster, where a
   * stream is missing for moments while it is placed.
   */
  StreamsLost: "StreamsLost",
  /** One of the mesh's store buckets is full (its `max_bytes`): the write was refused, nothing was lost. */
  StoreFull: "StoreFull",
  /** A stored record was written in a newer format than this program reads (record-version.ts): left alone, and named. */
  RecordTooNew: "RecordTooNew",
  Internal: "Internal",
} as const;
export type ErrorCode = (typeof ErrorCodes)[keyof typeof ErrorCodes];

export class MeshError extends Error {
  override readonly name = "MeshError";
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly options: { retryable?: boolean; cause?: unknown } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
  }
  /** Whether trying again later can succeed (a network blip) or not (a bad name). */
  get retryable(): boolean {
    return this.options.retryable ?? false;
  }
  toJSON(): { code: ErrorCode; message: string; retryable: boolean } {
    return { code: this.code, message: this.message, retryable: this.retryable };
  }
}

export function isMeshError(e: unknown, code?: ErrorCode): e is MeshError {
  return e instanceof MeshError && (code === undefined || e.code === code);
}

/** The message of anything thrown, for logs and conditions. */
export function errorMessage(e: unknown): string {
  if (e instanceof Error) return e.message;
  return String(e);
}
