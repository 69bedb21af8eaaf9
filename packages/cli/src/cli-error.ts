/**
 * A failure a user can hit, with a message that says what happened and what to do. meshctl's
 * entry point prints the message (no stack) and exits with {@link CliError.exitCode}.
 */
import { ExitCodes, type ExitCode } from "./exit-codes.js";

export class CliError extends Error {
  override readonly name = "CliError";
  constructor(
    message: string,
    readonly exitCode: ExitCode = ExitCodes.Failure,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** True for a {@link CliError}. */
export function isCliError(e: unknown): e is CliError {
  return e instanceof CliError;
}
