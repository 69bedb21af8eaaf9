#!/usr/bin/env node
/**
 * mesh-provisioner: `NATS_URL`, and the master key from `MESH_MASTER_KEY` or the file
 * `MESH_MASTER_KEY_FILE` (default `.mesh/master.key`, created with mode 0600 if missing).
 * Admin passwords of providers come from the variables or files their documents name.
 */
import { runService, serviceMasterKey } from "@mesh/shared";
import { packageVersion, traced } from "@mesh/telemetry";
import { startProvisioner } from "./provisioner.js";

await runService("provisioner", traced("mesh-provisioner", packageVersion(import.meta.url), ({ store, log }) => startProvisioner({ store, masterKey: serviceMasterKey(log), log })));
