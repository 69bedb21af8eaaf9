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
  /** `meshctl verify`: the grant was checked and is not verified (the output says why). */
  NotVerified: 4,
  /** The grant (`rotate`) or rotation (`trace`) named does not exist. */
  NotFound: 5,
  /** `meshctl rotate`: a rotation of the grant is already running (the message names it). */
  AlreadyRotating: 6,
  /** The service that must answer is not running (`rotate`: the rotator); the message says how to start it. */
  ServiceUnavailable: 7,
  /** `meshctl rotate --wait`: the rotation is Stalled, holders missing (named); it commits by itself when they confirm. */
  RotationStalled: 8,
  /**
   * A wait ran out of time: `rotate --wait` (no outcome; the rotator may be down or slow), `wait`
   * and `apply --wait` (a module is not in the state waited for; the message names what it is in),
   * `delete` (the providers have not revoked what was deleted yet).
   */
  WaitTimedOut: 9,
} as const;
export type ExitCode = (typeof ExitCodes)[keyof typeof ExitCodes];
