/** What provisioning and taking back a grant work with, and the steps a test may freeze a take-back after. */
import { hostname } from "node:os";
import type { Store } from "@mesh/shared/runtime";
import type { Logger } from "@mesh/shared/service";
import type { AdapterPool, CredentialStore } from "@mesh/providers";

/** The store, the credential store, the adapters and the log that reconciling a grant uses. */
export interface ProvisionDeps {
  store: Store;
  credentials: CredentialStore;
  adapters: AdapterPool;
  log: Logger;
  /** TEST HOOK (`MESH_PROVISIONER_TEST_PAUSE_AFTER`): freeze after this step of a take-back, so a test can SIGKILL the process there. */
  testPauseAfter?: TakeBackStep;
  onTestPause?: (step: TakeBackStep) => void;
}

/** The steps of taking a grant back after which a test may freeze the provisioner. */
export const TakeBackSteps = ["Revoked", "Purged"] as const;
export type TakeBackStep = (typeof TakeBackSteps)[number];

/** Who a provisioner is in the records it writes (a repair's `by`): `provisioner@<host>/<pid>`. */
export const PROVISIONER_INSTANCE = `provisioner@${hostname()}/${process.pid}`;
