#!/usr/bin/env node
/**
 * mesh-resolver: `NATS_URL` (default nats://127.0.0.1:4222). Runs until SIGINT/SIGTERM.
 */
import { connectNats, createLogger, errorMessage, openStore } from "@mesh/shared";
import { startResolver } from "./resolver.js";

const log = createLogger("resolver");
try {
  const nc = await connectNats();
  const store = await openStore(nc);
  const resolver = await startResolver({ store, log });
  log.info({ nats: nc.getServer() }, "resolver connected");
  const shutdown = async (signal: string) => {
    log.info({ signal }, "resolver stopping");
    await resolver.stop();
    await nc.drain();
    process.exit(0);
  };
  process.once("SIGINT", () => void shutdown("SIGINT"));
  process.once("SIGTERM", () => void shutdown("SIGTERM"));
} catch (e) {
  log.fatal({ err: errorMessage(e) }, "resolver could not start");
  process.stderr.write(`mesh-resolver: ${errorMessage(e)}\n`);
  process.exit(1);
}
