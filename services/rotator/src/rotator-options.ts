/**
 * Options of {@link startRotator}.
 */
import type { CredentialKeys } from "@mesh/providers";
import type { MasterKey, RotationState } from "@mesh/shared";
import type { Store } from "@mesh/shared/runtime";
import type { Logger } from "@mesh/shared/service";

export interface RotatorOptions {
  store: Store;
  /**
   * The keys credentials are encrypted under (the provisioner's): the service's key ring
   * (storeKeyRing), or one master key. A rotation of `mesh/master-key` re-encrypts the store before it commits.
   */
  masterKey: MasterKey | CredentialKeys;
  log: Logger;
  /** Where providers' admin passwords are read from (their `passwordEnv`); default `process.env`. */
  env?: NodeJS.ProcessEnv;
  /** How long holders have to confirm before a rotation is `Stalled`, unless the request says; default 5 min. */
  defaultTimeoutMs?: number;
  /** Between sweeps over running rotations (deadlines, work left by a crashed instance); default 5 s. */
  sweepMs?: number;
  /** How often requirements' `rotate: { every }` schedules are checked; default 60 s. */
  scheduleCheckMs?: number;
  /** How many generations of a credential the store keeps; older ones are purged at a commit (default `CREDENTIAL_HISTORY`, 5; at least 2). */
  credentialHistory?: number;
  /** Replicas of the holder streams it makes (1 on one server, 3 on a cluster); default the store's (`MESH_REPLICAS`, else 3 on a cluster of three or more, else 1). */
  replicas?: number;
}

/**
 * TEST HOOKS, never for production, and so not among {@link RotatorOptions}: after persisting a
 * rotation in state `pauseAfter` the rotator stops doing any work (it hangs, as if frozen), so a
 * test can SIGKILL it in exactly that state. Set in a process by `MESH_ROTATOR_TEST_PAUSE_AFTER`.
 * With `Broadcast` the broadcast step writes that state alone, where it otherwise goes on to
 * `AwaitingHolders` in the same write (a record is left in `Broadcast` when the grant's
 * `Rotating` condition could not be written beside the broadcast, or by an older rotator).
 */
export interface RotatorTestHooks {
  pauseAfter?: RotationState;
  /** Called when the hook paused the rotator. */
  onPause?: (state: RotationState) => void;
  /** Freeze once the first artifact of a handover's copy is written (carry-over.ts), so a test can SIGKILL it in the middle of the copy. Set in a process by `MESH_ROTATOR_TEST_PAUSE_IN_CARRY`. */
  pauseInCarry?: boolean;
  /** Called when that hook paused the rotator. */
  onPauseInCarry?: () => void;
}

/** Default of {@link RotatorOptions.defaultTimeoutMs}. */
export const DEFAULT_ROTATION_TIMEOUT_MS = 5 * 60_000;
