#!/usr/bin/env node
/**
 * mesh-rotator: `NATS_URL`, the master key from `MESH_MASTER_KEY` or the file
 * `MESH_MASTER_KEY_FILE` (default `.mesh/master.key`), admin passwords of providers from the
 * variables or files their documents name (as for the provisioner). `MESH_ROTATION_TIMEOUT`
 * (default `5m`) is how long holders have to confirm before a rotation is Stalled;
 * `MESH_CREDENTIAL_HISTORY` (default 5, at least 2) how many generations of a credential the
 * store keeps, the older ones purged at each commit.
 *
 * TEST HOOK: `MESH_ROTATOR_TEST_PAUSE_AFTER=Staged|Broadcast|AwaitingHolders` freezes the
 * process right after it persisted a rotation in that state, so a test can SIGKILL it there.
 * `MESH_ROTATOR_TEST_PAUSE_IN_CARRY=<file>` freezes it once the first artifact of a handover's
 * copy is written, unless `<file>` exists, which it then creates (so the process restarted
 * after the kill copies on). Never set either in production.
 */
import { existsSync, writeFileSync } from "node:fs";
import { RotationStates, errorMessage, meshVersion, parseTimerDuration, type RotationState } from "@mesh/shared";
import { runService, serviceMasterKey, serviceCommandLine } from "@mesh/shared/service";
import { storeKeyRing } from "@mesh/providers";
import { startRotator } from "./rotator.js";
import { observed } from "@mesh/telemetry";

serviceCommandLine("rotator", meshVersion(import.meta.url));

function usageError(message: string): never {
  process.stderr.write(`mesh-rotator: ${message}\n`);
  process.exit(2);
}

const pause = process.env.MESH_ROTATOR_TEST_PAUSE_AFTER as RotationState | undefined;
if (pause && !Object.values(RotationStates).includes(pause)) usageError(`MESH_ROTATOR_TEST_PAUSE_AFTER=${pause} is not a rotation state`);
const carryMarker = process.env.MESH_ROTATOR_TEST_PAUSE_IN_CARRY;
const pauseInCarry = carryMarker ? !existsSync(carryMarker) : false;
let defaultTimeoutMs: number | undefined;
try {
  defaultTimeoutMs = process.env.MESH_ROTATION_TIMEOUT ? parseTimerDuration(process.env.MESH_ROTATION_TIMEOUT, "MESH_ROTATION_TIMEOUT") : undefined;
} catch (e) {
  usageError(errorMessage(e));
}
const history = process.env.MESH_CREDENTIAL_HISTORY;
if (history !== undefined && history !== "" && !(/^\d+$/.test(history) && Number(history) >= 2 && Number(history) <= 1_000)) {
  usageError(`MESH_CREDENTIAL_HISTORY=${history} is not a number of generations from 2 to 1000 (the current one and the one just retired at least)`);
}

await runService(
  "rotator",
  observed("mesh-rotator", meshVersion(import.meta.url), ({ store, log }) =>
    startRotator(
      {
        store,
        masterKey: storeKeyRing(store, serviceMasterKey(log)),
        log,
        ...(defaultTimeoutMs ? { defaultTimeoutMs } : {}),
        ...(history ? { credentialHistory: Number(history) } : {}),
      },
      {
        ...(pause ? { pauseAfter: pause, onPause: (s: RotationState) => process.stdout.write(`TEST-HOOK paused-after ${s}\n`) } : {}),
        ...(pauseInCarry
          ? {
              pauseInCarry,
              onPauseInCarry: () => {
                writeFileSync(carryMarker!, `${process.pid}\n`);
                process.stdout.write("TEST-HOOK paused-in-carry\n");
              },
            }
          : {}),
      },
    ),
  ),
);
