#!/usr/bin/env node
/**
 * mesh-provisioner: `NATS_URL`, and the master key from `MESH_MASTER_KEY` or the file
 * `MESH_MASTER_KEY_FILE` (default `.mesh/master.key`, created with mode 0600 if missing).
 * Admin passwords of providers come from the variables or files their documents name.
 */
import { connectNats, createLogger, errorMessage, loadMasterKey, openStore } from "@mesh/shared";
import { startProvisioner } from "./provisioner.js";

const log = createLogger("provisioner");
try {
  const { key, source, created } = loadMasterKey(process.env, ".mesh/master.key");
  log.info({ keyId: key.id, from: source }, created ? "created a new master key (keep this file; credentials are encrypted under it)" : "master key loaded");
  const nc = await connectNats();
  const store = await openStore(nc);
  const provisioner = await startProvisioner({ store, masterKey: key, log });
  log.info({ nats: nc.getServer() }, "provisioner connected");
  const shutdown = async (signal: string) => {
    log.info({ signal }, "provisioner stopping");
    await provisioner.stop();
    await nc.drain();
    process.exit(0);
  };
  process.once("SIGINT", () => void shutdown("SIGINT"));
  process.once("SIGTERM", () => void shutdown("SIGTERM"));
} catch (e) {
  log.fatal({ err: errorMessage(e) }, "provisioner could not start");
  process.stderr.write(`mesh-provisioner: ${errorMessage(e)}\n`);
  process.exit(1);
}
