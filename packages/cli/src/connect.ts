/**
 * Connecting meshctl to NATS and opening the store, with failures that say which server
 * was tried and how to get one.
 */
import { DEFAULT_NATS_URL, ErrorCodes, connectNats, isMeshError, openStore, type NatsConnection, type Store } from "@mesh/shared";
import { CliError } from "./cli-error.js";
import { rootMessage } from "./nats-errors.js";

/** The NATS URL meshctl uses: `--server`, else `NATS_URL`, else nats://127.0.0.1:4222. */
export function natsUrlFrom(option: string | undefined, env: NodeJS.ProcessEnv = process.env): string {
  return option || env.NATS_URL || DEFAULT_NATS_URL;
}

/** What to tell a user whose NATS at `url` did not answer. */
export function natsUnreachableMessage(url: string, cause: string): string {
  return [
    `cannot reach NATS at ${url} (${cause}).`,
    "The mesh needs a running nats-server with JetStream. Either",
    "  start the whole mesh on this machine:  npx meshctl up",
    "  or start only a server:                nats-server -js",
    "or point NATS_URL (or --server) at a server that runs.",
  ].join("\n");
}

/** What to tell a user whose NATS at `url` has no JetStream. */
export function noJetStreamMessage(url: string, cause: string): string {
  return [
    `the NATS server at ${url} answers but JetStream is not available (${cause}).`,
    "The mesh keeps its state in JetStream: restart the server with -js (nats-server -js),",
    "or point NATS_URL (or --server) at a server with JetStream.",
  ].join("\n");
}

/** Connects to `url`; a failure is a {@link CliError} that explains how to get a server. */
export async function connectForCli(url: string): Promise<NatsConnection> {
  try {
    return await connectNats(url, { timeout: 3_000, maxReconnectAttempts: 3 });
  } catch (e) {
    // The server answered and refused the identity: "start a nats-server" would mislead.
    if (isMeshError(e, ErrorCodes.ProviderMisconfigured)) {
      throw new CliError(
        `${e.message}.\nOn a mesh set up by meshctl bootstrap, use the line it printed: MESH_NATS_CREDENTIALS=.mesh/nats-operator/admin.creds`,
        undefined,
        { cause: e },
      );
    }
    throw new CliError(natsUnreachableMessage(url, rootMessage(e)), undefined, { cause: e });
  }
}

/** Opens the mesh's store on `nc`; a server without JetStream is a {@link CliError}. */
export async function openStoreForCli(nc: NatsConnection, url: string): Promise<Store> {
  try {
    return await openStore(nc);
  } catch (e) {
    throw new CliError(noJetStreamMessage(url, rootMessage(e)), undefined, { cause: e });
  }
}
