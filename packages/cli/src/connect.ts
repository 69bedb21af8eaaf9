/**
 * Connecting meshctl to NATS and opening the store, with failures that say which server
 * was tried and how to get one.
 */
import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import type { ConnectionOptions } from "@nats-io/transport-node";
import { ErrorCodes, isMeshError } from "@mesh/shared";
import {
  DEFAULT_NATS_URL,
  connectNats,
  isJetStreamTimeout,
  isStoreCreateFailure,
  jetStreamTimeoutMessage,
  natsIdentity,
  openStore,
  type NatsConnection,
  type Store,
} from "@mesh/shared/runtime";
import { bootstrapFiles } from "./bootstrap.js";
import { CliError, isCliError } from "./cli-error.js";
import { isRequestTimeout, rootMessage } from "./nats-errors.js";
import { meshctlCommand } from "./paths.js";
import type { ChosenIdentity } from "./nats-context.js";

/** Where `meshctl up` records the address of the NATS server it runs, under the state directory. */
export const NATS_URL_FILE = "nats-url";

/**
 * The NATS URL meshctl uses: `--server`, else `NATS_URL`, else the URL of the NATS context named
 * (`contextUrl`), else the address `meshctl up` recorded in `.mesh/nats-url` of the working
 * directory, else nats://127.0.0.1:4222.
 */
export function natsUrlFrom(option: string | undefined, env: NodeJS.ProcessEnv = process.env, cwd = process.cwd(), contextUrl?: string): string {
  if (option) return option;
  if (env.NATS_URL) return env.NATS_URL;
  if (contextUrl) return contextUrl;
  try {
    const recorded = readFileSync(join(resolve(cwd, ".mesh"), NATS_URL_FILE), "utf8").trim();
    if (recorded) return recorded;
  } catch {
    // none recorded
  }
  return DEFAULT_NATS_URL;
}

/** True when the user named a server (`--server` or `NATS_URL`). */
export const isNamedServer = (option: string | undefined, env: NodeJS.ProcessEnv = process.env) => Boolean(option || env.NATS_URL);

/**
 * The identity meshctl connects with: `--creds` (or `NATS_CREDS`) when given, else the identity
 * of the NATS context named (`--context`), else `MESH_NATS_CREDENTIALS` (or `MESH_NATS_USER`)
 * when set, else the operator admin's `.creds` that `meshctl up` or `bootstrap` left in `.mesh/`
 * of the working directory, else none. `--server` and `NATS_URL` change only the address.
 */
export function cliIdentity(env: NodeJS.ProcessEnv = process.env, cwd = process.cwd(), chosen: ChosenIdentity = {}): Partial<ConnectionOptions> {
  if (chosen.creds) return credsIdentity(`--creds ${chosen.creds}`, chosen.creds);
  const c = chosen.context;
  if (c && (c.creds || c.user || c.token)) {
    const inbox = c.inboxPrefix ? { inboxPrefix: c.inboxPrefix } : {};
    if (c.creds) return { ...credsIdentity(`NATS context ${c.name} (${c.file}): creds ${c.creds}`, c.creds), ...inbox };
    if (c.user) return { ...natsIdentity({ MESH_NATS_USER: c.user, MESH_NATS_PASSWORD: c.password ?? "" }), ...inbox };
    return { token: c.token, ...inbox };
  }
  if (env.MESH_NATS_CREDENTIALS || env.MESH_NATS_USER) return natsIdentity(env);
  const creds = ownAdminCreds(env, resolve(cwd, ".mesh"));
  return creds ? natsIdentity({ MESH_NATS_CREDENTIALS: creds }) : {};
}

/** The identity of a `.creds` file (or `nats.user` binding directory) the command line named, refused in the words of where it was named. */
function credsIdentity(named: string, path: string): Partial<ConnectionOptions> {
  try {
    return natsIdentity({ MESH_NATS_CREDENTIALS: path });
  } catch (e) {
    if (!isMeshError(e)) throw e;
    throw new CliError(`${named}: ${e.message.replace(/^MESH_NATS_CREDENTIALS=\S+: /, "")}`, undefined, { cause: e });
  }
}

/**
 * The operator admin's `.creds` in the state directory `stateDir` when that is the identity to
 * use: there is one, and the environment names none (`MESH_NATS_CREDENTIALS`, `MESH_NATS_USER`).
 */
export function ownAdminCreds(env: NodeJS.ProcessEnv, stateDir: string): string | undefined {
  if (env.MESH_NATS_CREDENTIALS || env.MESH_NATS_USER) return undefined;
  const creds = bootstrapFiles(stateDir).adminCredsFile;
  return existsSync(creds) ? creds : undefined;
}

/** What to tell a user whose NATS at `url` did not answer. */
export function natsUnreachableMessage(url: string, cause: string): string {
  return [
    `cannot reach NATS at ${url} (${cause}).`,
    "The mesh needs a running nats-server with JetStream. Either",
    `  start the whole mesh on this machine:  ${meshctlCommand()} up`,
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

/** What to tell a user whose NATS at `url` kept failing to create the store's streams. */
export function storeCreateFailedMessage(url: string): string {
  return [
    `the NATS server at ${url} could not create the mesh's streams for 20 s ("error creating store for stream"; the server's own log says why).`,
    "On a cluster that is still forming, try again in a few seconds. Otherwise check that the server's store directory",
    "(its jetstream store_dir) is writable and has room.",
  ].join("\n");
}

/**
 * How long one connection handshake of meshctl may take. No server listening is refused at
 * once whatever this is; it bounds a server that accepted the connection but is slow to finish
 * the handshake (a loaded machine: the four meshctl processes the lock-out test starts together
 * met 3 s), as long as the JetStream API's own timeout.
 */
export const CLI_CONNECT_TIMEOUT_MS = 10_000;

/**
 * How long meshctl keeps trying handshakes that time out, as long as a command rides out what
 * the mesh marks retryable (retry.ts): one slow handshake on a loaded machine (seen in CI, with
 * four meshctl processes started together beside a cluster's tests) is not a server that is gone.
 */
export const CLI_CONNECT_DEADLINE_MS = 30_000;

/** Connects to `url`; a failure is a {@link CliError} that explains how to get a server. */
export async function connectForCli(
  url: string,
  o: { timeoutMs?: number; deadlineMs?: number; onRetry?: (line: string) => void; identity?: ChosenIdentity } = {},
): Promise<NatsConnection> {
  const timeoutMs = o.timeoutMs ?? CLI_CONNECT_TIMEOUT_MS;
  const deadline = Date.now() + (o.deadlineMs ?? CLI_CONNECT_DEADLINE_MS);
  for (let attempt = 1; ; attempt++) {
    try {
      return await connectNats(url, { timeout: timeoutMs, maxReconnectAttempts: 3, ...cliIdentity(process.env, process.cwd(), o.identity) });
    } catch (e) {
      // What the command line named cannot be used: said as it is.
      if (isCliError(e)) throw e;
      // The server answered and refused the identity: "start a nats-server" would mislead.
      if (isMeshError(e, ErrorCodes.ProviderMisconfigured)) {
        throw new CliError(
          `${e.message}.\nRun meshctl from the directory of the meshctl up or bootstrap that runs this mesh (its .mesh/ holds the operator's credentials), or name them: --creds .mesh/nats-operator/admin.creds (or NATS_CREDS=, or MESH_NATS_CREDENTIALS=)`,
          undefined,
          { cause: e },
        );
      }
      // Accepted, but the handshake did not finish in time: tried again while the deadline allows one more.
      if (isRequestTimeout(e) && Date.now() + timeoutMs <= deadline) {
        (o.onRetry ?? ((line: string) => void process.stderr.write(`${line}\n`)))(
          `meshctl: NATS at ${url} did not finish the connection's handshake within ${timeoutMs / 1000} s (a busy server or machine); trying again`,
        );
        continue;
      }
      const tried = attempt > 1 ? `; tried ${attempt} times` : "";
      throw new CliError(natsUnreachableMessage(url, `${rootMessage(e)}${tried}`), undefined, { cause: e });
    }
  }
}

/** What opening the store says of its buckets' limits, as meshctl's lines on stderr (JSON logs are for services). */
const storeNotes = {
  info: (_: object, msg: string) => void process.stderr.write(`meshctl: ${msg}\n`),
  warn: (_: object, msg: string) => void process.stderr.write(`meshctl: warning: ${msg}\n`),
};

/** Opens the mesh's store on `nc`; a server without JetStream is a {@link CliError}. */
export async function openStoreForCli(nc: NatsConnection, url: string): Promise<Store> {
  try {
    return await openStore(nc, { log: storeNotes });
  } catch (e) {
    if (isStoreCreateFailure(e)) throw new CliError(storeCreateFailedMessage(url), undefined, { cause: e, retryable: true });
    if (isJetStreamTimeout(e)) throw new CliError(jetStreamTimeoutMessage("opening the mesh's store", url), undefined, { cause: e, retryable: true });
    throw new CliError(noJetStreamMessage(url, rootMessage(e)), undefined, { cause: e });
  }
}
