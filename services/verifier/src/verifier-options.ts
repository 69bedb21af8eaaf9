/**
 * Options of {@link startVerifier}.
 */
import type { CredentialKeys } from "@mesh/providers";
import type { MasterKey } from "@mesh/shared";
import type { Store } from "@mesh/shared/runtime";
import type { Logger } from "@mesh/shared/service";

/** How a verifier runs; only `store`, `masterKey` and `log` are required. */
export interface VerifierOptions {
  /** The opened store. The verifier does not close its connection. */
  store: Store;
  /** To read the credential history (every generation, encrypted). */
  /** The keys credentials are encrypted under: the service's key ring (storeKeyRing), or one master key. */
  masterKey: MasterKey | CredentialKeys;
  log: Logger;
  /** Where providers' admin passwords are read from (their `passwordEnv`); default `process.env`. */
  env?: NodeJS.ProcessEnv;
  /** Default interval between checks of a grant, when its requirement sets none; default `MESH_VERIFY_INTERVAL` or 10 s. */
  intervalMs?: number;
  /** Checks in flight at once; default 16. */
  concurrency?: number;
  /** This instance's name in records and repair events; default `verifier@<host>/<pid>`. */
  instance?: string;
  /** How long a forced check waits for an agent's probe; default 3 s. */
  probeTimeoutMs?: number;
  /** Random numbers in [0, 1) for jitter; for tests. */
  random?: () => number;
}
