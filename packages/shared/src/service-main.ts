/**
 * The one shape of every service's main: connect to NATS, open the store, start, and on the
 * first SIGINT/SIGTERM stop once, drain and exit 0 (a second signal exits at once). A failure
 * to start is printed with what to do and exits 1.
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { ErrorCodes, MeshError, errorMessage } from "./errors.js";
import { SOURCE_OF_RECORD } from "./subjects.js";
import { createLogger, type Logger } from "./logger.js";
import { loadMasterKey, type MasterKey } from "./crypto.js";
import { connectNats, type NatsConnection } from "./connect.js";
import { openStore, type Store } from "./store.js";
import { DEFAULT_STATE_DIR, StateFiles } from "./state-dir.js";
import { meshVersion } from "./release-version.js";
import { serveMicro } from "./micro-service.js";
import type { MicroService } from "./micro.js";
import { microServiceName } from "./control-plane.js";

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

/**
 * Runs service `name` (`mesh-<name>` in messages) until a signal. Never returns normally. It
 * answers the NATS micro protocol as `micro.name` (default {@link microServiceName}) with `micro.metadata`.
 */
export async function runService(
  name: string,
  start: (ctx: ServiceContext) => Promise<RunningService>,
  log: Logger = createLogger(name),
  micro: { name?: string; metadata?: Record<string, string> } = {},
): Promise<void> {
  try {
    const nc = await connectNats(undefined, { name: `mesh-${name}` });
    // What the server refuses (a permission this identity lacks) reaches no caller when it was a
    // plain publish: logged, so a service that lacks a permission says so. A lost connection is
    // logged once, and its return, so a service that stood still says why and for how long.
    void (async () => {
      let lostAt: number | undefined;
      // A reconnect this service asked for (a new generation of its identity) is no loss.
      let asked = false;
      for await (const s of nc.status()) {
        if (s.type === "error")
          log.warn(
            { err: (s as { error?: unknown }).error },
            "the NATS server refused something this service sent: its identity may lack a permission it needs",
          );
        else if (s.type === "forceReconnect") asked = true;
        else if (s.type === "disconnect" && lostAt === undefined) {
          lostAt = Date.now();
          if (!asked) log.warn({ nats: s.server }, `${name} lost its connection to NATS at ${s.server}; reconnecting (its work waits)`);
          asked = false;
        } else if (s.type === "reconnect") {
          log.info({ nats: s.server, downMs: lostAt === undefined ? undefined : Date.now() - lostAt }, `${name} is connected to NATS again, at ${s.server}`);
          lostAt = undefined;
        }
      }
    })().catch(() => undefined);
    const store = await openStore(nc, { log });
    checkSourceOfRecord(log);
    const service = await start({ nc, store, log });
    const described: MicroService = {
      name: micro.name ?? microServiceName(name),
      version: meshVersion(import.meta.url) ?? "0.0.0",
      description: `the mesh's ${name}`,
      ...(micro.metadata ? { metadata: micro.metadata } : {}),
    };
    const answering = serveMicro(nc, described, log);
    log.info({ nats: nc.getServer(), micro: { name: described.name, id: answering.id } }, `${name} started`);
    if (nc.info && !nc.info.auth_required) log.warn({ nats: nc.getServer() }, unauthenticatedWarning(nc.getServer()));
    const identity = followIdentity(nc, log);
    let stopping = false;
    const shutdown = async (signal: string) => {
      if (stopping) process.exit(1);
      stopping = true;
      log.info({ signal }, `${name} stopping`);
      identity?.stop();
      try {
        await answering.stop();
        await service.stop();
        await nc.drain();
        process.exit(0);
      } catch (e) {
        // Not an unhandled rejection that ends the process unsaid: what failed, then a non-zero exit.
        log.error({ err: e }, `${name} did not stop cleanly: ${errorMessage(e)}; exiting (its work resumes from the store when it starts again)`);
        await nc.drain().catch(() => undefined);
        process.exit(1);
      }
    };
    process.on("SIGINT", () => void shutdown("SIGINT"));
    process.on("SIGTERM", () => void shutdown("SIGTERM"));
    service.closed?.catch((e: unknown) => {
      log.fatal({ err: e }, `${name} failed`);
      process.exit(1);
    });
    // A connection that closed for good (not by a stop) leaves a process that only looks alive:
    // exit, so the supervisor or systemd starts it again.
    void nc.closed().then((e) => {
      if (stopping) return;
      log.fatal({ err: e ?? "closed" }, `${name} lost its NATS connection for good; exiting so it is started again`);
      process.exit(1);
    });
  } catch (e) {
    log.fatal({ err: e }, `${name} could not start`);
    process.stderr.write(`mesh-${name}: ${errorMessage(e)}\n`);
    process.exit(1);
  }
}

/**
 * The key-encryption key of a service that reads or writes credentials, from `MESH_MASTER_KEY`
 * or `MESH_MASTER_KEY_FILE` (default `master.key` in `MESH_STATE_DIR`, `.mesh`, created 0600
 * when missing): it is never delivered; it wraps the data keys of grant `mesh/master-key` that
 * the store is encrypted under (providers' master-key-ring.ts). Logs where it came from and its
 * id, never the key.
 */
export function serviceMasterKey(log: Logger, env: NodeJS.ProcessEnv = process.env): MasterKey {
  const { key, source, created } = loadMasterKey(env, join(env.MESH_STATE_DIR || DEFAULT_STATE_DIR, StateFiles.masterKey));
  log.info(
    { keyId: key.id, from: source },
    created
      ? "created a new master key file (keep it: it wraps the data keys the credentials are encrypted under)"
      : "master key file loaded (the key-encryption key)",
  );
  return key;
}

/**
 * Why the source of record a `mesh/records` binding names (its `buckets` and `streams` files)
 * is not the one this service opens ({@link SOURCE_OF_RECORD}), or undefined when it is.
 */
export function sourceOfRecordProblem(bound: { buckets?: string; streams?: string }): string | undefined {
  const want = { buckets: SOURCE_OF_RECORD.buckets.join(","), streams: SOURCE_OF_RECORD.streams.join(",") };
  if (bound.buckets === want.buckets && bound.streams === want.streams) return undefined;
  return (
    `the records grant names buckets ${bound.buckets ?? "(none)"} and streams ${bound.streams ?? "(none)"}, but this service keeps its state in buckets ${want.buckets} and streams ${want.streams}; ` +
    "run the services of the version whose control plane declared that grant, or apply the control plane again (meshctl bootstrap) so the grant names this version's store"
  );
}

/**
 * With `MESH_RECORDS_BINDING` (its `mesh/records` binding, which meshctl sets when it moves the
 * service onto its identity), checks that the store it opened is the one the grant names, and
 * throws a MeshError saying what differs when it is not. A binding not written yet is logged.
 */
export function checkSourceOfRecord(log: Logger, env: NodeJS.ProcessEnv = process.env): void {
  const dir = env.MESH_RECORDS_BINDING;
  if (!dir) return;
  const read = (k: string) => {
    try {
      return readFileSync(join(dir, k), "utf8").trim();
    } catch {
      return undefined;
    }
  };
  const bound = { buckets: read("buckets"), streams: read("streams") };
  if (bound.buckets === undefined && bound.streams === undefined) {
    log.warn({ binding: dir }, "the records binding (MESH_RECORDS_BINDING) is not written yet; this service uses the source of record of its version");
    return;
  }
  const problem = sourceOfRecordProblem(bound);
  if (problem) throw new MeshError(ErrorCodes.InvalidRequest, `${dir}: ${problem}`);
  log.info({ binding: dir, buckets: bound.buckets, streams: bound.streams }, "source of record: the buckets and streams grant mesh/records names");
}

/** What a service and meshctl say, loudly, about a NATS server without authentication. */
export function unauthenticatedWarning(server: string): string {
  return `WARNING: the NATS server at ${server} has no authentication: anyone who can reach it can take every credential of this mesh, apply any document, and forge rotation notices and confirmations. Run the mesh on a server whose operator is the mesh (meshctl up without NATS_URL or --server starts one; meshctl nats-config configures one).`;
}

/** How often a service looks at its identity's binding for a new generation. */
export const IDENTITY_CHECK_MS = 1_000;

/**
 * When the process connects as a granted identity (`MESH_NATS_CREDENTIALS`), reconnects as
 * soon as the agent writes a new generation to that binding, so the service is on the new
 * user before the rotation retires the old one (and the server drops its connections). The
 * reconnect reads the files again (see natsIdentity); subscriptions and pending requests
 * survive it. Undefined when there is no identity to follow.
 */
export function followIdentity(nc: NatsConnection, log: Logger, env: NodeJS.ProcessEnv = process.env): { stop(): void } | undefined {
  const dir = env.MESH_NATS_CREDENTIALS;
  if (!dir) return undefined;
  // A binding's creds (a new generation, or a renewed JWT), or its username on a server with plain users; a .creds file itself.
  const file = [join(dir, "creds"), join(dir, "username")].find((f) => existsSync(f)) ?? dir;
  const read = () => {
    try {
      return readFileSync(file, "utf8").trim();
    } catch {
      return undefined;
    }
  };
  let current = read();
  const timer = setInterval(() => {
    const next = read();
    if (!next || next === current) return;
    // Never the content: a creds file holds the identity's seed.
    log.info({ binding: file }, "the binding of this service's NATS identity changed; reconnecting with it");
    current = next;
    nc.reconnect().catch((e: unknown) =>
      log.warn({ err: e }, "could not reconnect with the new identity; the server will drop the old one at commit and the client reconnects then"),
    );
  }, IDENTITY_CHECK_MS);
  timer.unref();
  return { stop: () => clearInterval(timer) };
}
