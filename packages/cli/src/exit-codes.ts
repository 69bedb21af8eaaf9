/** Exit codes of meshctl. Scripts may rely on them. */
export const ExitCodes = {
  /** Done as asked. */
  Ok: 0,
  /** Failed: a rejected manifest, an unreachable NATS, a resolver that does not answer… */
  Failure: 1,
  /** Wrong command-line usage. */
  Usage: 2,
  /** The module named has never been processed by the resolver: it has no state at all. */
  NotProcessed: 3,
} as const;
export type ExitCode = (typeof ExitCodes)[keyof typeof ExitCodes];
