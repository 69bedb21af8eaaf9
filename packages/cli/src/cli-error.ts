/**
 * A failure a user can hit, with a message that says what happened and what to do. meshctl's
 * entry point prints the message (no stack) and exits with {@link CliError.exitCode}.
 * A `retryable` one (no service answers yet, one marked its refusal retryable, JetStream did
 * not answer) is tried again within the command's deadline ({@link retrying}).
 */
import { ExitCodes, type ExitCode } from "./exit-codes.js";

export class CliError extends Error {
  override readonly name = "CliError";
  readonly retryable: boolean;
  constructor(
    message: string,
    readonly exitCode: ExitCode = ExitCodes.Failure,
    options?: { cause?: unknown; retryable?: boolean },
  ) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.retryable = options?.retryable ?? false;
  }
}

/** True for a {@link CliError}. */
export function isCliError(e: unknown): e is CliError {
  return e instanceof CliError;
}
