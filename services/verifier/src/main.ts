#!/usr/bin/env node
/**
 * mesh-verifier: re-checks every grant and repairs drift by policy.
 *
 * Environment: `NATS_URL`; the master key from `MESH_MASTER_KEY` or the file
 * `MESH_MASTER_KEY_FILE` (default `.mesh/master.key`, the provisioner's: the verifier reads the
 * credential history with it); `MESH_VERIFY_INTERVAL` (default `10s`), the interval between
 * checks of a grant whose requirement sets no `verify.every`; `MESH_LOG_LEVEL`. Providers'
 * admin passwords come from the variables or files their documents name, as for the
 * provisioner (without them the verifier still logs in, but cannot observe or repair).
 * Exits 1 when it cannot start (a bad `MESH_VERIFY_INTERVAL` included), 0 after SIGINT/SIGTERM.
 */
import { errorMessage, meshVersion } from "@mesh/shared";
import { runService, serviceMasterKey, serviceCommandLine } from "@mesh/shared/service";
import { storeKeyRing } from "@mesh/providers";
import { observed } from "@mesh/telemetry";
import { globalInterval } from "./schedule.js";
import { startVerifier } from "./verifier.js";

serviceCommandLine("verifier", meshVersion(import.meta.url));

let intervalMs: number;
try {
  intervalMs = globalInterval(process.env);
} catch (e) {
  process.stderr.write(`mesh-verifier: ${errorMessage(e)}\n`);
  process.exit(1);
}
await runService(
  "verifier",
  observed("mesh-verifier", meshVersion(import.meta.url), async ({ store, log }) =>
    startVerifier({ store, masterKey: storeKeyRing(store, serviceMasterKey(log)), log, intervalMs }),
  ),
);
