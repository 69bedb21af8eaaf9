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
 * Exits 1 when it cannot start, 0 after SIGINT/SIGTERM.
 */
import { connectNats, createLogger, errorMessage, loadMasterKey, openStore } from "@mesh/shared";
import { globalInterval } from "./schedule.js";
import { startVerifier } from "./verifier.js";

const log = createLogger("verifier");
try {
  const intervalMs = globalInterval(process.env);
  const { key, source, created } = loadMasterKey(process.env, ".mesh/master.key");
  log.info({ keyId: key.id, from: source }, created ? "created a new master key (keep this file; credentials are encrypted under it)" : "master key loaded");
  const nc = await connectNats();
  const store = await openStore(nc);
  const verifier = await startVerifier({ store, masterKey: key, log, intervalMs });
  log.info({ nats: nc.getServer() }, "verifier connected");
  const shutdown = async (signal: string) => {
    log.info({ signal }, "verifier stopping");
    await verifier.stop();
    await nc.drain();
    process.exit(0);
  };
  process.once("SIGINT", () => void shutdown("SIGINT"));
  process.once("SIGTERM", () => void shutdown("SIGTERM"));
} catch (e) {
  log.fatal({ err: errorMessage(e) }, "verifier could not start");
  process.stderr.write(`mesh-verifier: ${errorMessage(e)}\n`);
  process.exit(1);
}
