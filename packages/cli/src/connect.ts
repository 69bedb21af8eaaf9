/**
 * Connecting meshctl to NATS and opening the store, with failures that say which server
 * was tried and how to get one.
 */
import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import type { ConnectionOptions } from "@nats-io/transport-node";
import { ErrorCodes, errorMessage, isMeshError, sleep, StateFiles } from "@mesh/shared";
import { caFiles } from "@mesh/providers";
import {
  DEFAULT_NATS_URL,
  connectNats,
  isJetStreamTimeout,
  isStoreCreateFailure,
  isUntrustedServer,
  JETSTREAM_GAP_RIDE_OUT_MS,
  jetStreamUnavailable,
  natsIdentity,
  natsTls,
  openStore,
  type NatsConnection,
  type Store,
} from "@mesh/shared/runtime";
import { bootstrapFiles } from "./bootstrap.js";
import { CliError, isCliError } from "./cli-error.js";
import { isRequestTimeout, rootMessage } from "./nats-errors.js";
import { rememberIdentity } from "./operator-identity.js";
import { meshctlCommand } from "./paths.js";
import { remainingMs, retrying, type RetryPolicy } from "./retry.js";
import type { ChosenIdentity } from "./nats-context.js";

/** Where `meshctl up` records the address of the NATS server it runs, under the state directory. */
export const NATS_URL_FILE = "nats-url";

/** The first server of a NATS URL list (`tls://h:p,…`, `h:p`; port 4222 when none is given), or undefined for one that does not parse. */
export function firstNatsServer(url: string): { host: string; port: number } | undefined {
  const first = url.split(",")[0]!.trim();
  try {
    const u = new URL(/^[a-z]+:\/\//i.test(first) ? first : `nats://${first}`);
    return { host: u.hostname.replace(/^\[|\]$/g, ""), port: Number(u.port || 4222) };
  } catch {
    return undefined;
  }
}

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
  return { ...identityOf(env, cwd, chosen), ...ownServerTls(env, resolve(cwd, ".mesh"), chosen) };
}

function identityOf(env: NodeJS.ProcessEnv, cwd: string, chosen: ChosenIdentity): Partial<ConnectionOptions> {
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

/**
 * The bundle the NATS context names (`ca`), else the mesh's authority's in the state directory `stateDir`, when it is what
 * verifies the server: the server `meshctl up` or `bootstrap` runs from there requires TLS (its
 * certificate is installed there), and neither `MESH_NATS_CA_FILE` nor the identity's binding
 * (a `ca.crt` in it) names another.
 */
export function ownServerTls(env: NodeJS.ProcessEnv, stateDir: string, chosen: ChosenIdentity = {}): Partial<ConnectionOptions> {
  if (chosen.context?.ca) return { tls: { caFile: chosen.context.ca } };
  if (env.MESH_NATS_CA_FILE || natsTls(chosen.creds ? { MESH_NATS_CREDENTIALS: chosen.creds } : env).tls) return {};
  const caFile = caFiles(join(stateDir, StateFiles.caDir)).certFile;
  return existsSync(join(bootstrapFiles(stateDir).dir, "tls", "current")) && existsSync(caFile) ? { tls: { caFile } } : {};
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

/** What to tell a user whose NATS server at `url` runs without JetStream (its INFO says so, and no one answers JetStream's API). */
export function noJetStreamMessage(url: string): string {
  return [
    `the NATS server at ${url} runs without JetStream (it says so when a client connects, and no one answers JetStream's API).`,
    "The mesh keeps its state in JetStream: restart the server with -js (nats-server -js, or jetstream {} in its config),",
    "or point NATS_URL (or --server) at a server with JetStream.",
  ].join("\n");
}

/** What to tell a user whose identity's account has no JetStream on the server at `url`, which has it. */
export function accountWithoutJetStreamMessage(url: string): string {
  return [
    `the NATS server at ${url} runs JetStream, but not for the account meshctl connected to ("JetStream not enabled for account").`,
    "Connect as an identity of the account that holds the mesh: --creds FILE (or NATS_CREDS=; meshctl up and bootstrap leave the",
    "operator admin's in .mesh/nats-operator/admin.creds), or enable JetStream for this account: jetstream: enabled in its block",
    "of the server's accounts {…}, or JetStream limits in its JWT under an operator (nsc edit account --js-disk-storage -1 --js-mem-storage -1).",
  ].join("\n");
}

/** What to tell a user whose NATS cluster at `url` had no JetStream leader to answer (`why`: what it said, or that it said nothing). */
export function clusterElectingMessage(url: string, why: string): string {
  return [
    `the NATS cluster at ${url} has no JetStream leader to answer now (${why}): its servers elect one after a server was lost or restarted.`,
    "An election ends by itself within seconds while a majority of the cluster's servers run and reach each other. If it goes on, check",
    "that they do: each server's /healthz?js-server-only=true on its monitoring port, or nats server report jetstream.",
  ].join("\n");
}

/** What to tell a user whose one NATS server at `url`, with JetStream, did not answer its JetStream request. */
export function noAnswerMessage(url: string): string {
  return [
    `JetStream of the NATS server at ${url} did not answer in time: the server or its machine is overloaded, or it is reloading its configuration.`,
    "Try again in a few seconds; if it goes on, see the server's log (and its /jsz on the monitoring port).",
  ].join("\n");
}

/** What to tell a user whose NATS at `url` kept failing to create the store's streams. */
export function storeCreateFailedMessage(url: string): string {
  return [
    `the NATS server at ${url} could not create the mesh's streams ("error creating store for stream"; the server's own log says why).`,
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

/**
 * How long an identity the server refuses is offered again before meshctl says so. nats-server
 * 2.9.10 in operator mode refused the admin's own identity for a moment while it reloaded its
 * configuration (a rotation of the server's certificate, seen under CI); a wrong identity is
 * said this much later.
 */
export const CLI_IDENTITY_RELOAD_MS = 2_000;

/** Connects to `url`; a failure is a {@link CliError} that explains how to get a server. */
export async function connectForCli(
  url: string,
  o: { timeoutMs?: number; deadlineMs?: number; onRetry?: (line: string) => void; identity?: ChosenIdentity } = {},
): Promise<NatsConnection> {
  const timeoutMs = o.timeoutMs ?? CLI_CONNECT_TIMEOUT_MS;
  const deadline = Date.now() + (o.deadlineMs ?? CLI_CONNECT_DEADLINE_MS);
  let refusedSince: number | undefined;
  for (let attempt = 1; ; attempt++) {
    try {
      const identity = cliIdentity(process.env, process.cwd(), o.identity);
      const nc = await connectNats(url, { timeout: timeoutMs, maxReconnectAttempts: 3, ...identity });
      rememberIdentity(nc, identity.inboxPrefix);
      return nc;
    } catch (e) {
      // What the command line named cannot be used: said as it is.
      if (isCliError(e)) throw e;
      // The server answered and refused the identity: "start a nats-server" would mislead.
      if (isMeshError(e, ErrorCodes.ProviderMisconfigured)) {
        // Offered again for a moment first when the server refused it (not a file that cannot be read): a server
        // reloading its configuration may refuse it in between.
        const refused = /authorization violation|authentication/i.test(errorMessage(e.cause));
        refusedSince ??= Date.now();
        if (refused && Date.now() - refusedSince < CLI_IDENTITY_RELOAD_MS) {
          await sleep(250);
          continue;
        }
        throw new CliError(
          `${e.message}.\nRun meshctl from the directory of the meshctl up or bootstrap that runs this mesh (its .mesh/ holds the operator's credentials), or name them: --creds .mesh/nats-operator/admin.creds (or NATS_CREDS=, or MESH_NATS_CREDENTIALS=)`,
          undefined,
          { cause: e },
        );
      }
      // A server whose certificate this process does not trust: said as connectNats words it (what to set).
      if (isMeshError(e, ErrorCodes.ProviderUnreachable) && isUntrustedServer(e.cause)) throw new CliError(e.message, undefined, { cause: e });
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

/**
 * How long an account without JetStream is taken for a server reloading its configuration,
 * which says the same for a moment (2.9.10): past it, the account has none.
 */
const ACCOUNT_RELOAD_MS = JETSTREAM_GAP_RIDE_OUT_MS;

/** How long one JetStream request of meshctl waits for an answer, unless its deadline is nearer. */
const CLI_JETSTREAM_TIMEOUT_MS = 10_000;

/**
 * Opens the mesh's store on `nc`, trying again within `policy`'s deadline while JetStream is not
 * there for now (a cluster electing its leaders, a server reloading, a stream's store not made
 * yet), and saying once on stderr what it waits for. What it cannot ride out is a {@link CliError}
 * whose advice fits what the server said: a server without JetStream, an account without it, a
 * cluster with no leader, or no answer. Each of the store's requests waits at most a third of
 * the deadline (and 10 s).
 */
export async function openStoreForCli(nc: NatsConnection, url: string, policy: RetryPolicy, auditRetentionMs?: number): Promise<Store> {
  const began = Date.now();
  // A third of the deadline at most, so that an election that ends within it is met by a later attempt.
  const apiTimeoutMs = Math.min(CLI_JETSTREAM_TIMEOUT_MS, Math.max(1_000, Math.floor(remainingMs(policy) / 3)));
  return retrying("opening the mesh's store", policy, async () => {
    try {
      // One attempt each: the deadline is the command's.
      return await openStore(nc, { log: storeNotes, rideOutMs: 0, apiTimeoutMs, ...(auditRetentionMs ? { auditRetentionMs } : {}) });
    } catch (e) {
      if (isStoreCreateFailure(e)) throw new CliError(storeCreateFailedMessage(url), undefined, { cause: e, retryable: true });
      throw (
        jetStreamUnavailableError(e, url, nc.info, Date.now() - began) ??
        new CliError(`could not open the mesh's store on the NATS server at ${url}: ${rootMessage(e)}`, undefined, { cause: e })
      );
    }
  });
}

/**
 * `e`, met by a JetStream request `elapsedMs` after the command's first, on a connection to the
 * server at `url` that said `info` of itself, as a {@link CliError} whose advice fits why
 * JetStream was not there ({@link jetStreamUnavailable}), retryable while that may pass by itself;
 * undefined when `e` says something else.
 */
export function jetStreamUnavailableError(e: unknown, url: string, info: NatsConnection["info"], elapsedMs: number): CliError | undefined {
  switch (jetStreamUnavailable(e, info)) {
    case "cluster-electing":
      return new CliError(clusterElectingMessage(url, isJetStreamTimeout(e) ? "no answer in time" : rootMessage(e)), undefined, { cause: e, retryable: true });
    case "server-without-jetstream":
      return new CliError(noJetStreamMessage(url), undefined, { cause: e });
    case "account-without-jetstream":
      return new CliError(accountWithoutJetStreamMessage(url), undefined, { cause: e, retryable: elapsedMs < ACCOUNT_RELOAD_MS });
    case "no-answer":
      return new CliError(noAnswerMessage(url), undefined, { cause: e, retryable: true });
    default:
      return undefined;
  }
}
