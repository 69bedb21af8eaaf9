#!/usr/bin/env node
/**
 * mesh-provisioner: `NATS_URL`, and the key-encryption key from `MESH_MASTER_KEY` or the file
 * `MESH_MASTER_KEY_FILE` (default `.mesh/master.key`, created with mode 0600 if missing); the
 * data keys credentials are encrypted under are the generations of grant `mesh/master-key`,
 * read from the store under it (master-key-ring.ts).
 * Admin passwords of providers come from the variables or files their documents name.
 *
 * TEST HOOK: `MESH_PROVISIONER_TEST_PAUSE_AFTER=Revoked|Purged` freezes the process after that
 * step of taking a grant back (it prints `TEST-HOOK paused-after <step>`), so a test can
 * SIGKILL it there and show that a fresh provisioner finishes.
 */
import { meshVersion } from "@mesh/shared";
import { runService, serviceMasterKey, serviceCommandLine } from "@mesh/shared/service";
import { observed } from "@mesh/telemetry";
import { storeKeyRing } from "@mesh/providers";
import { startProvisioner } from "./provisioner.js";
import { TakeBackSteps, type TakeBackStep } from "./provision-deps.js";

serviceCommandLine("provisioner", meshVersion(import.meta.url));

const pause = process.env.MESH_PROVISIONER_TEST_PAUSE_AFTER as TakeBackStep | undefined;
if (pause && !TakeBackSteps.includes(pause)) {
  process.stderr.write(`mesh-provisioner: MESH_PROVISIONER_TEST_PAUSE_AFTER=${pause} is not one of ${TakeBackSteps.join(", ")}\n`);
  process.exit(2);
}

await runService(
  "provisioner",
  observed("mesh-provisioner", meshVersion(import.meta.url), ({ store, log }) =>
    startProvisioner({
      store,
      masterKey: storeKeyRing(store, serviceMasterKey(log)),
      log,
      ...(pause ? { testPauseAfter: pause, onTestPause: (s: TakeBackStep) => process.stdout.write(`TEST-HOOK paused-after ${s}\n`) } : {}),
    }),
  ),
);
