/**
 * The one shape of every service's main: connect to NATS, open the store, start, and on the
 * first SIGINT/SIGTERM stop once, drain and exit 0 (a second signal exits at once). A failure
 * to start is printed with what to do and exits 1.
 */
import { errorMessage } from "./errors.js";
import { createLogger, type Logger } from "./logger.js";
import { loadMasterKey, type MasterKey } from "./crypto.js";
import { connectNats, openStore, type NatsConnection, type Store } from "./nats.js";

/** A started service: `stop()` ends its work; `closed`, if given, rejecting means it failed for good. */
export interface RunningService {
  stop(): Promise<void>;
  closed?: Promise<unknown>;
}

export interface ServiceContext {
  nc: NatsConnection;
  store: Store;
  log: Logger;
}

/** Runs service `name` (`mesh-<name>` in messages) until a signal. Never returns normally. */
export async function runService(name: string, start: (ctx: ServiceContext) => Promise<RunningService>, log: Logger = createLogger(name)): Promise<void> {
  try {
    const nc = await connectNats();
    const store = await openStore(nc);
    const service = await start({ nc, store, log });
    log.info({ nats: nc.getServer() }, `${name} started`);
    let stopping = false;
    const shutdown = async (signal: string) => {
      if (stopping) process.exit(1);
      stopping = true;
      log.info({ signal }, `${name} stopping`);
      await service.stop();
      await nc.drain();
      process.exit(0);
    };
    process.on("SIGINT", () => void shutdown("SIGINT"));
    process.on("SIGTERM", () => void shutdown("SIGTERM"));
    service.closed?.catch((e: unknown) => {
      log.fatal({ err: errorMessage(e) }, `${name} failed`);
      process.exit(1);
    });
  } catch (e) {
    log.fatal({ err: errorMessage(e) }, `${name} could not start`);
    process.stderr.write(`mesh-${name}: ${errorMessage(e)}\n`);
    process.exit(1);
  }
}

/**
 * The master key of a service that reads or writes credentials, from `MESH_MASTER_KEY` or
 * `MESH_MASTER_KEY_FILE` (default `.mesh/master.key`, created 0600 when missing); logs where it
 * came from and its id, never the key.
 */
export function serviceMasterKey(log: Logger, env: NodeJS.ProcessEnv = process.env): MasterKey {
  const { key, source, created } = loadMasterKey(env, ".mesh/master.key");
  log.info({ keyId: key.id, from: source }, created ? "created a new master key (keep this file; credentials are encrypted under it)" : "master key loaded");
  return key;
}
