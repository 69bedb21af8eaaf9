/**
 * `meshctl up`: the whole mesh on this machine in one process tree. It uses the NATS server
 * at the URL or starts one, runs the resolver, the provisioner and one agent per node as
 * child processes (their logs under `.mesh/logs/`), applies the given files once the resolver
 * answers, and shows a live status until Ctrl-C; then it stops everything it started.
 */
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import {
  adminEnv,
  bootstrapFiles,
  busProvider,
  tlsUrl,
  controlPlaneFiles,
  identityBinding,
  partOfService,
  recordsBinding,
  waitForControlPlane,
  waitForIdentityBindings,
} from "./bootstrap.js";
import { caFiles, ensureMeshCa, prepareOperatorServer } from "@mesh/providers";
import { join, relative, isAbsolute } from "node:path";
import {
  BOOTSTRAP_PROVIDER,
  CONTROL_PLANE_MODULE,
  ControlPlaneRequirements,
  NATS_SERVER_PART,
  ErrorCodes,
  IDENTITY_BINDING,
  Kinds,
  NAME_RULE,
  errorMessage,
  isMeshError,
  isValidName,
  loadMasterKey,
  MESH_CA_PROVIDER,
  ProviderDoc,
  StateFiles,
  meshCaProvider,
  subjects,
  formatHookList,
  type AllowedHooks,
  type MasterKey,
} from "@mesh/shared";
import { connectNats, readJson, type NatsConnection, storeReplicas } from "@mesh/shared/runtime";
import { unauthenticatedWarning } from "@mesh/shared/service";
import { reportApply, sendApply } from "./apply-command.js";
import { pause, retryPolicy } from "./retry.js";
import { hostForUrl, parseDuration, parseHostPort, type ListenAddress } from "@mesh/shared";
import { CliError } from "./cli-error.js";
import { NATS_URL_FILE, cliIdentity, natsUnreachableMessage, openStoreForCli, ownAdminCreds } from "./connect.js";
import { ExitCodes } from "./exit-codes.js";
import { liveLine, startLiveStatus, type LiveStatus } from "./live-status.js";
import { checkRestoreTarget, movedServerWarning, openBackupFile, putBackKeys, restoreStreams } from "./backup-command.js";
import { stateDirsOf } from "./backup-state-files.js";
import { findNatsServer, freeTcpPort, isTcpPortFree, loopbackAddress, startLocalNats, type StartedNats } from "./local-nats.js";
import { formatFileProblems, loadManifestFiles, nodesOfParts, type FileReader, type ManifestFile } from "./manifest-files.js";
import { isNoResponders, isRequestTimeout, rootMessage } from "./nats-errors.js";
import type { ServerCertificate } from "./bootstrap.js";
import { holdServerCertificate, issueUpServerCertificate, UP_NATS_TLS_LIFETIME, type ServerTlsOptions } from "./nats-server-tls.js";
import type { Output } from "./output.js";
import { meshctlCommand, serviceMain, upPaths, type ServiceProgram, type UpPaths } from "./paths.js";
import { makePrivateDir, tightenTree } from "./private-tree.js";
import { Supervisor, type ChildEvent, type ServiceSpec } from "./supervisor.js";

/** The node an agent runs for when neither `--nodes` nor the applied parts name one. */
export const DEFAULT_NODE = "node-a";

export interface UpOptions {
  /** Manifest files to apply once the mesh runs. */
  files: string[];
  /** Nodes to run an agent for; default: those named by the parts in `files`, else node-a. */
  nodes?: string[];
  /** Bindings root; each agent writes under `<bindings>/<node>/`. Default `.mesh/bindings`. */
  bindings?: string;
  natsUrl: string;
  /** Directory relative paths are taken from (default: the working directory). */
  cwd?: string;
  /** State directory (default `.mesh`). */
  stateDir?: string;
  /** Master key file handed to the provisioner (default `.mesh/master.key`, or `MESH_MASTER_KEY_FILE`). */
  masterKeyFile?: string;
  /** The entry point of each service (default: this installation's, {@link serviceMain}). */
  serviceMain?: (name: ServiceProgram) => string;
  reader?: FileReader;
  /**
   * Whether the user named the server (`--server`, `NATS_URL`): only a named server is used
   * when one answers; otherwise up starts its own (default: named, as the URL is given).
   */
  natsUrlNamed?: boolean;
  /**
   * The monitoring port of the server up starts (`--nats-monitor`, parsed by
   * {@link parseNatsMonitor}; port 0: a free one); none when absent. Ignored for a server up
   * does not start.
   */
  natsMonitor?: ListenAddress;
  /** How long the server certificate of the server up starts is valid (`--nats-tls-lifetime`, default {@link UP_NATS_TLS_LIFETIME}); renewed at two thirds while up runs. */
  natsTlsLifetimeMs?: number;
  /** `--metrics-listen`: where the services serve their metrics and health ({@link withMetricsListen}). */
  metricsListen?: ListenAddress;
  /** How long the audit trail keeps a record (`--audit-retention`): set on the stream when it differs. */
  auditRetentionMs?: number;
  /**
   * `--restore FILE --key-file KEY`: the mesh is brought back from a backup (backup-command.ts):
   * its keys are put in the state directory before anything is made there, and its streams onto
   * the server (which must hold none of them) before any service starts.
   */
  restore?: { file: string; key: MasterKey };
  /** How long to wait for the resolver to answer (default 60 s). */
  resolverWaitMs?: number;
  /** Grace period of each child on shutdown before SIGKILL (default 5 s). */
  graceMs?: number;
  /** Hooks every agent it runs allows (`--allow-hook NAME=COMMAND`), for parts' `onRotate`. */
  hooks?: AllowedHooks;
  /** Who the agents run hooks as (`--hook-user`; the agents' default: `nobody`). */
  hookUser?: string;
  /**
   * `meshctl bootstrap`: NATS with authentication, the control plane declared as module
   * `mesh`, and the services moved onto the identities it grants them (see bootstrap.ts).
   */
  bootstrap?: {
    /** The node the services run on (default: the first node). */
    servicesNode?: string;
    /** How long to wait for module `mesh` to be Ready (default 120 s). */
    readyWaitMs?: number;
  };
}

/** The nodes the all-in-one runs an agent for. */
export function chooseNodes(given: readonly string[] | undefined, files: readonly ManifestFile[]): string[] {
  if (given?.length) return [...new Set(given)];
  const named = nodesOfParts(files);
  return named.length ? named : [DEFAULT_NODE];
}

/**
 * The services of the all-in-one, with their environment and log files. Every service learns
 * where the mesh's own files are (`MESH_STATE_DIR`, `MESH_BINDINGS_ROOT`: the root of every
 * node's bindings), which no Provider's admin password may name; an agent's
 * `MESH_BINDINGS_ROOT` is its node's own. Every agent gets the same hooks (`MESH_ALLOW_HOOKS`,
 * `MESH_HOOK_USER`): they all run on this machine.
 */
export function serviceSpecs(opts: {
  main: (name: ServiceProgram) => string;
  paths: UpPaths;
  natsUrl: string;
  nodes: readonly string[];
  env?: Record<string, string>;
  hooks?: AllowedHooks;
  hookUser?: string;
}): ServiceSpec[] {
  const common = {
    NATS_URL: opts.natsUrl,
    MESH_MASTER_KEY_FILE: opts.paths.masterKey,
    MESH_STATE_DIR: opts.paths.state,
    MESH_BINDINGS_ROOT: opts.paths.bindings,
    // Not meshctl's own, which every service would inherit and try to listen on: each gets a port of its own (withMetricsListen).
    MESH_METRICS_LISTEN: "",
    ...opts.env,
  };
  const hooks = { ...(opts.hooks?.size ? { MESH_ALLOW_HOOKS: formatHookList(opts.hooks) } : {}), ...(opts.hookUser ? { MESH_HOOK_USER: opts.hookUser } : {}) };
  const log = (name: string) => join(opts.paths.logs, `${name}.log`);
  return [
    { name: "resolver", script: opts.main("resolver"), env: { ...common }, logFile: log("resolver") },
    { name: "provisioner", script: opts.main("provisioner"), env: { ...common }, logFile: log("provisioner") },
    { name: "verifier", script: opts.main("verifier"), env: { ...common }, logFile: log("verifier") },
    { name: "rotator", script: opts.main("rotator"), env: { ...common }, logFile: log("rotator") },
    ...opts.nodes.map((node) => ({
      name: `agent ${node}`,
      script: opts.main("agent"),
      env: { ...common, MESH_NODE: node, MESH_BINDINGS_ROOT: join(opts.paths.bindings, node), ...hooks },
      logFile: log(`agent-${node}`),
    })),
  ];
}

/** `--metrics-listen HOST:PORT`, checked before anything starts; throws a CliError (exit 2) that says what to give. */
export function parseMetricsListen(spec: string): ListenAddress {
  const addr = parseHostPort(spec);
  if (!addr)
    throw new CliError(
      `--metrics-listen ${JSON.stringify(spec)} is not HOST:PORT; give e.g. 127.0.0.1:9464 ([::1]:9464 for IPv6; port 0 gives each service a free port)`,
      ExitCodes.Usage,
    );
  return addr;
}

/**
 * `specs` with their metrics and health addresses (`MESH_METRICS_LISTEN`): the first service's
 * at `at`, the others' on the ports after it, one each, in order (port 0: each any free one,
 * which its log names). Throws a CliError (exit 2) when the ports would run past 65535.
 */
export function withMetricsListen(specs: readonly ServiceSpec[], at: ListenAddress): ServiceSpec[] {
  if (at.port !== 0 && at.port + specs.length - 1 > 65535)
    throw new CliError(
      `--metrics-listen ${hostForUrl(at.host)}:${at.port}: the ${specs.length} services take ports ${at.port} to ${at.port + specs.length - 1}; give a lower port`,
      ExitCodes.Usage,
    );
  return specs.map((spec, i) => ({ ...spec, env: { ...spec.env, MESH_METRICS_LISTEN: `${hostForUrl(at.host)}:${at.port === 0 ? 0 : at.port + i}` } }));
}

/** The hosts `--nats-monitor` takes: the server up starts listens on loopback, and serves monitoring on that address. */
const MONITOR_HOSTS: Readonly<Record<string, string>> = { "127.0.0.1": "127.0.0.1", localhost: "127.0.0.1", "::1": "::1" };

/**
 * `--nats-monitor HOST:PORT`: the monitoring address of the server up starts, its host
 * `127.0.0.1` (or `localhost`) or `::1`, port 0 for a free one. nats-server 2.9 serves
 * monitoring on its client address, which is loopback for a server up starts, so no other
 * host can be given. Throws a CliError (exit 2) that says what to give.
 */
export function parseNatsMonitor(spec: string): ListenAddress {
  const addr = parseHostPort(spec);
  if (!addr)
    throw new CliError(
      `--nats-monitor ${JSON.stringify(spec)} is not HOST:PORT with a port from 0 to 65535; give e.g. 127.0.0.1:8222 ([::1]:8222 for IPv6; port 0 picks a free one)`,
      ExitCodes.Usage,
    );
  const host = MONITOR_HOSTS[addr.host];
  if (!host) {
    throw new CliError(
      `--nats-monitor ${spec}: the NATS server meshctl up starts serves monitoring on its own client address, which is loopback; give 127.0.0.1:${addr.port} (or [::1]:${addr.port} when the server's URL is [::1])`,
      ExitCodes.Usage,
    );
  }
  return { host, port: addr.port };
}

/** What up says, loudly, when it opens the NATS monitoring port (`--nats-monitor`). */
export function monitorExposureLine(url: string): string {
  return `WARNING: the NATS monitoring port ${url} shows every identity's connections and subscriptions (${url}/connz?auth=1&subs=1: each connection's user key, name, address and subjects) to anyone who can reach it, without authentication; leave out --nats-monitor to keep it closed.`;
}

/** What up says, loudly, when it runs on a server without authentication. */
export function unauthenticatedLines(url: string): string[] {
  const bar = "!".repeat(78);
  return [bar, unauthenticatedWarning(url), bar];
}

/**
 * Where up's own server listens: at the named URL's port; otherwise at the port it used last
 * (`.mesh/nats-url`), else 4222, when free, else a free port, which it names.
 */
async function listenAddress(url: string, named: boolean, stateDir: string, out: Output): Promise<{ host: string; port: number }> {
  const host = "127.0.0.1";
  if (named) return loopbackAddress(url)!;
  let recorded: number | undefined;
  try {
    recorded = loopbackAddress(readFileSync(join(stateDir, NATS_URL_FILE), "utf8").trim())?.port;
  } catch {
    // first run here
  }
  for (const port of [recorded, 4222]) {
    if (port !== undefined && (await isTcpPortFree(host, port))) return { host, port };
  }
  const port = await freeTcpPort(host);
  out.out(
    `port 4222 is taken on ${host} (another server listens there, not this mesh's); the mesh's NATS listens on nats://${host}:${port} instead (recorded in ${join(stateDir, NATS_URL_FILE)}, where every meshctl command run from this directory finds it)`,
  );
  return { host, port };
}

/**
 * Makes the state directory, its logs and the bindings root, closed to other local users
 * (directories 0700, files 0600), and tightens what an earlier meshctl left there more open,
 * saying so. A bindings root outside the state directory is the user's: made 0700 when
 * missing, left as it is when not (the agents make what they write in it 0700/0600).
 */
export function closeStateDir(paths: UpPaths, out: Output, show: (p: string) => string = (p) => p): void {
  makePrivateDir(paths.state);
  const { tightened, foreign } = tightenTree(paths.state);
  makePrivateDir(paths.logs);
  makePrivateDir(paths.bindings);
  if (tightened.length) {
    out.out(
      `closed ${tightened.length} ${tightened.length === 1 ? "entry" : "entries"} under ${show(paths.state)}/ to other local users (directories 0700, files 0600); an earlier meshctl had left them readable`,
    );
  }
  if (foreign.length) {
    const some = foreign.slice(0, 3).map(show).join(", ");
    out.err(
      `${foreign.length} ${foreign.length === 1 ? "entry" : "entries"} under ${show(paths.state)}/ belong to another user, so meshctl cannot close them to others: ${some}${foreign.length > 3 ? ", …" : ""}; remove them or change their owner`,
    );
  }
}

/** A path as shown to the user: relative to `cwd` when inside it. */
export function displayPath(cwd: string, p: string): string {
  const r = relative(cwd, p);
  return r && !r.startsWith("..") && !isAbsolute(r) ? r : p;
}

/**
 * Waits until something answers on the apply subject: an apply with no documents is
 * rejected by the resolver without storing anything, so any reply means it runs.
 */
export async function waitForResolver(
  nc: NatsConnection,
  opts: { timeoutMs: number; signal: AbortSignal; onWait: (elapsedMs: number) => void },
): Promise<boolean> {
  const start = Date.now();
  let lastNote = 0;
  while (!opts.signal.aborted) {
    try {
      await nc.request(subjects.apply, JSON.stringify({ documents: [], source: "meshctl up (is the resolver running?)" }), { timeout: 2_000 });
      return true;
    } catch (e) {
      if (!isNoResponders(e) && !isRequestTimeout(e)) throw new CliError(`cannot reach the resolver: ${rootMessage(e)}`, undefined, { cause: e });
    }
    const elapsed = Date.now() - start;
    if (elapsed > opts.timeoutMs) return false;
    if (elapsed - lastNote >= 5_000) {
      opts.onWait(elapsed);
      lastNote = elapsed;
    }
    await pause(250, opts.signal);
  }
  return false;
}

/**
 * The up command. Returns when `stop` is aborted (exit code 0) or when the mesh cannot run
 * (1: bad files, no NATS and no nats-server to start, services not built, a resolver that
 * never answers, a service that keeps failing at start). Everything it started is stopped
 * before it returns.
 */
export async function runUp(opts: UpOptions, out: Output, stop: AbortSignal): Promise<number> {
  const cwd = opts.cwd ?? process.cwd();
  const paths = upPaths({
    cwd,
    state: opts.stateDir,
    bindings: opts.bindings,
    masterKeyFile: opts.masterKeyFile ?? (process.env.MESH_MASTER_KEY_FILE || undefined),
  });
  const show = (p: string) => displayPath(cwd, p);

  let files: ManifestFile[] = [];
  if (opts.files.length) {
    const loaded = await loadManifestFiles(opts.files, opts.reader);
    if (!loaded.ok) {
      out.err(formatFileProblems(loaded.problems));
      out.err("rejected: nothing was started or applied.");
      return ExitCodes.Failure;
    }
    files = loaded.files;
  }
  const nodes = chooseNodes(opts.nodes, files);
  // The services' identities are written by the agent of their node: it must run one.
  const servicesNode = opts.bootstrap?.servicesNode;
  if (servicesNode && !nodes.includes(servicesNode)) nodes.unshift(servicesNode);
  const badNode = nodes.find((n) => !isValidName(n));
  if (badNode !== undefined) throw new CliError(`--nodes: ${JSON.stringify(badNode)} is not a node name: a name ${NAME_RULE}`, ExitCodes.Usage);

  // Each service's program is found (or up says which is missing and how to repair the install) before anything starts.
  const main = opts.serviceMain ?? serviceMain;
  const probeUrl = opts.natsUrl;
  serviceSpecs({ main, paths, natsUrl: probeUrl, nodes });
  // A backup's keys go in first: the master key, operator and authority below would otherwise be made anew.
  const backup = opts.restore && openBackupFile(opts.restore.file, opts.restore.key);
  if (backup) {
    const written = putBackKeys(backup, { masterKeyFile: paths.masterKey, dirs: stateDirsOf(paths.state) });
    out.out(
      `restoring the backup of ${backup.header.createdAt} (meshctl ${backup.header.meshVersion}): ` +
        (written.length ? `wrote ${written.map(show).join(", ")}` : "its master key and keys were in place already"),
    );
  }
  closeStateDir(paths, out, show);
  // The mesh's certificate authority, made once under the master key the services hold: it
  // signs the certificate of the server up starts, and serves as provider mesh-ca.
  const ca = caFiles(join(paths.state, StateFiles.caDir));
  const { key: masterKey } = loadMasterKey({ ...process.env, MESH_MASTER_KEY_FILE: paths.masterKey }, paths.masterKey);
  let caCreated: boolean;
  try {
    ({ created: caCreated } = await ensureMeshCa(ca, masterKey));
  } catch (e) {
    throw new CliError(`cannot set up the mesh's certificate authority in ${show(ca.dir)}: ${errorMessage(e)}`);
  }

  // Internal end: a stop signal (exit 0) or a failure while running (exit 1).
  let finish!: (code: number) => void;
  const finished = new Promise<number>((resolve) => (finish = resolve));
  const onStop = () => finish(ExitCodes.Ok);
  stop.addEventListener("abort", onStop, { once: true });
  if (stop.aborted) return ExitCodes.Ok;
  const quit = new AbortController();
  void finished.then(() => quit.abort());

  let nats: StartedNats | undefined;
  let serverCert: ServerCertificate | undefined;
  /** Where the server up started listens, and how long its certificate's generations are valid. */
  let serverAt: { host: string; port: number; lifetimeMs: number } | undefined;
  let tlsHolder: { stop(): Promise<void>; first: Promise<void> } | undefined;
  let nc: NatsConnection | undefined;
  let live: LiveStatus | undefined;
  const notify = (line: string) => (live ? live.event(line) : out.err(line));
  const supervisor = new Supervisor({
    onEvent: (e: ChildEvent) => {
      if (e.type === "exited") {
        const how = e.signal ? `was killed by ${e.signal}` : `exited with code ${e.code}`;
        notify(`${e.name} ${how}; restarting it in ${Math.round(e.restartInMs / 1000)} s. Its log: ${show(e.logFile)}`);
      } else {
        notify(`${e.name} failed ${e.quickExits} times right after starting; stopping the mesh. Its log: ${show(e.logFile)}`);
        finish(ExitCodes.Failure);
      }
    },
  });
  // If meshctl itself dies, its children must not live on.
  const emergency = () => {
    supervisor.killNow();
    nats?.killNow();
  };
  process.once("exit", emergency);

  // The server this command starts, when it starts one, has the mesh as its operator; its
  // keys and the operator's admin are kept here, for up and bootstrap alike.
  const own = bootstrapFiles(paths.state);
  // Under bootstrap, and whenever the server is this directory's mesh's own (started here, or one
  // whose operator's admin is in .mesh/), the services move onto identities the mesh grants them.
  let auth = opts.bootstrap ? own : undefined;
  // meshctl and the services connect as the operator's admin once there is one (or as MESH_NATS_CREDENTIALS says).
  const identity = () => cliIdentity(process.env, cwd);
  try {
    let url = probeUrl;
    let answered = false;
    // A server is used only when named (--server, NATS_URL), or by bootstrap at its URL.
    if (opts.natsUrlNamed !== false || opts.bootstrap) {
      try {
        nc = await connectNats(url, { timeout: 2_000, ...identity() });
        answered = true;
        out.out(`using the NATS server at ${url}`);
        if (auth && (!existsSync(auth.adminCredsFile) || !nc.info?.auth_required)) {
          throw new CliError(
            `a NATS server already answers at ${url}, but meshctl bootstrap did not set it up (no ${show(auth.adminCredsFile)}), so the mesh cannot issue identities on it.\n` +
              "Give bootstrap a free loopback URL (--server nats://127.0.0.1:4333), where it starts a server whose operator is the mesh, or run it from the directory of the bootstrap that set this one up (its .mesh/nats-operator/ is there).",
          );
        }
        if (!nc.info?.auth_required) for (const line of unauthenticatedLines(url)) out.err(line);
      } catch (e) {
        if (e instanceof CliError) throw e;
        if (isMeshError(e, ErrorCodes.ProviderMisconfigured)) {
          throw new CliError(
            `${e.message}.\nThe server at ${url} is not this directory's mesh: set MESH_NATS_CREDENTIALS to an identity it knows, or run meshctl up without NATS_URL or --server to start a server of its own.`,
          );
        }
        if (!loopbackAddress(url))
          throw new CliError(
            `${natsUnreachableMessage(url, rootMessage(e))}\n(meshctl up starts a server itself only for a loopback URL such as nats://127.0.0.1:4222.)`,
          );
      }
    }
    if (answered && opts.natsMonitor)
      out.err(`--nats-monitor is left unused: meshctl up did not start the server at ${url}, whose monitoring its own configuration sets`);
    if (!answered) {
      const bin = findNatsServer();
      if (!bin) {
        throw new CliError(
          `no NATS server runs for this mesh, and nats-server is not installed, so meshctl up cannot start one.\n` +
            "Install it with: apt-get install nats-server\n(or set NATS_URL to a running nats-server with JetStream)",
        );
      }
      const local = await listenAddress(url, opts.natsUrlNamed !== false || Boolean(opts.bootstrap), paths.state, out);
      const logFile = join(paths.logs, "nats-server.log");
      if (opts.natsMonitor && opts.natsMonitor.host !== local.host) {
        throw new CliError(
          `--nats-monitor ${hostForUrl(opts.natsMonitor.host)}:${opts.natsMonitor.port}: the server listens on ${local.host}, and serves monitoring there only; give --nats-monitor ${hostForUrl(local.host)}:${opts.natsMonitor.port}`,
          ExitCodes.Usage,
        );
      }
      const monitorPort = opts.natsMonitor && (opts.natsMonitor.port || (await freeTcpPort(local.host)));
      const monitorUrl = monitorPort && `http://${hostForUrl(local.host)}:${monitorPort}`;
      const tlsAt: ServerTlsOptions = { files: own, ca, masterKey, ...local, lifetimeMs: opts.natsTlsLifetimeMs ?? parseDuration(UP_NATS_TLS_LIFETIME) };
      serverCert = await issueUpServerCertificate(tlsAt);
      serverAt = { ...local, lifetimeMs: tlsAt.lifetimeMs };
      await prepareOperatorServer(own, masterKey, {
        ...local,
        ...(monitorPort ? { monitorPort } : {}),
        tls: { certFile: serverCert.certFile, keyFile: serverCert.keyFile },
      });
      out.out(
        `starting a NATS server whose operator is the mesh (TLS with certificate ${serverCert.serial} of the mesh's authority until the control plane's grant of one replaces it; JWT identities, full account resolver; a client without credentials is refused): ${bin} -c ${show(own.configFile)}` +
          ` (listening on nats://${local.host}:${local.port}; operator keys in ${show(own.dir)}, sealed under the master key; the admin's credentials in ${show(own.adminCredsFile)};` +
          ` ${monitorUrl ? `monitoring on ${monitorUrl}` : "no monitoring port (--nats-monitor HOST:PORT opens one)"}, log in ${show(logFile)})`,
      );
      if (monitorUrl) out.err(monitorExposureLine(monitorUrl));
      nats = await startLocalNats({ bin, host: local.host, port: local.port, storeDir: own.storeDir, logFile, configFile: own.configFile });
      url = nats.url;
      writeFileSync(join(paths.state, NATS_URL_FILE), `${url}\n`, { mode: 0o600 });
      try {
        nc = await connectNats(url, { timeout: 5_000, ...identity() });
      } catch (e2) {
        throw new CliError(`started nats-server, but cannot connect to ${url}: ${rootMessage(e2)}; see ${show(logFile)}`);
      }
    }
    if (!nc) throw new CliError(`no connection to NATS at ${url}`); // unreachable: each path above connects or throws
    if (backup) {
      await checkRestoreTarget(nc, backup);
      await restoreStreams(nc, backup, liveLine(out));
      out.out(
        `restored ${backup.contents.streams.length} streams onto ${url}; the services verify every grant as they start, and repair what changed since the backup`,
      );
    }
    if (!auth && (nats !== undefined || (ownAdminCreds(process.env, paths.state) !== undefined && nc.info?.auth_required === true))) auth = own;
    // On a server that requires TLS every client verifies it as meshctl did: against the mesh's
    // own bundle for the server up started, else the bundle meshctl was given (none: the
    // system's authorities). The parts' identities carry that bundle as ca.crt.
    const given = process.env.MESH_NATS_CA_FILE || (identity().tls as { caFile?: string } | undefined)?.caFile;
    const caFile = !nc.info?.tls_required ? undefined : nats ? ca.certFile : given;
    const busUrl = nc.info?.tls_required ? tlsUrl(url) : url;
    const store = await openStoreForCli(nc, url, retryPolicy({ option: null }, out), opts.auditRetentionMs);
    if (backup) {
      const restoredBus = (await readJson(store.kv.providers, BOOTSTRAP_PROVIDER, ProviderDoc).catch(() => undefined))?.value.endpoint;
      const moved = movedServerWarning(restoredBus, busUrl);
      if (moved) out.err(moved);
    }

    const plain = serviceSpecs({
      main,
      paths,
      natsUrl: url,
      nodes,
      env: { ...(ownAdminCreds(process.env, paths.state) ? adminEnv(own) : {}), ...(caFile ? { MESH_NATS_CA_FILE: caFile } : {}) },
      ...(opts.hooks ? { hooks: opts.hooks } : {}),
      ...(opts.hookUser ? { hookUser: opts.hookUser } : {}),
    });
    const specs = opts.metricsListen ? withMetricsListen(plain, opts.metricsListen) : plain;
    const started: string[] = [];
    for (const spec of specs) started.push(`${spec.name} (pid ${await supervisor.start(spec)})`);
    const metricsAt = specs.flatMap(({ name, env: own }) => (own.MESH_METRICS_LISTEN ? [`${name} http://${own.MESH_METRICS_LISTEN}`] : []));
    if (metricsAt.length && !metricsAt[0]!.endsWith(":0")) out.out(`metrics (/metrics) and health (/healthz, /readyz): ${metricsAt.join(", ")}`);
    else if (metricsAt.length) out.out(`metrics and health: each service on a free port, which its log names ("serving metrics at …")`);
    out.out(`started ${started.join(", ")}`);
    out.out(`logs: ${show(paths.logs)}/ (${specs.map((s) => s.logFile.slice(paths.logs.length + 1)).join(", ")})`);
    out.out(`bindings: ${show(paths.bindings)}/<node>/<module>/<part>/<requirement>/   master key: ${show(paths.masterKey)}`);

    out.out("waiting for the resolver…");
    const up = await waitForResolver(nc, {
      timeoutMs: opts.resolverWaitMs ?? 60_000,
      signal: quit.signal,
      onWait: (ms) => out.out(`still waiting for the resolver (${Math.round(ms / 1000)} s)…`),
    });
    if (!up) {
      if (quit.signal.aborted) return await finished;
      throw new CliError(
        `the resolver did not answer within ${Math.round((opts.resolverWaitMs ?? 60_000) / 1000)} s; see its log: ${show(join(paths.logs, "resolver.log"))}`,
      );
    }

    const applied: string[] = [];
    // The mesh's certificate authority as provider mesh-ca, first: the control plane requires the server's certificate of it.
    {
      const outcome = await sendApply(
        nc,
        [{ source: "meshctl up", documents: [meshCaProvider({ node: servicesNode ?? nodes[0]!, certFile: ca.certFile, keyFile: ca.keyFile })] }],
        undefined,
        retryPolicy({ option: null }, out),
      );
      const code = reportApply(outcome, false, out);
      if (code !== ExitCodes.Ok) return code;
      out.out(
        `${caCreated ? "made" : "using"} the mesh's certificate authority (${show(ca.certFile)}; its key sealed under the master key) as provider ${MESH_CA_PROVIDER} of ${Kinds.TlsCertificate}`,
      );
    }
    if (auth) {
      const cpNode = servicesNode ?? nodes[0]!;
      // The operator declares the control plane as it is now (a node fewer is theirs to decide): forced.
      const outcome = await sendApply(
        nc,
        [
          controlPlaneFiles({
            url: busUrl,
            ...(caFile ? { caFile } : {}),
            servicesNode: cpNode,
            nodes,
            files: auth,
            replicas: storeReplicas(nc.info),
            // The certificate of the server up runs is the control plane's to rotate, like any other.
            ...(nats && serverAt ? { serverTls: { ipAddresses: [serverAt.host], lifetime: `${Math.round(serverAt.lifetimeMs / 1000)}s` } } : {}),
          }),
        ],
        undefined,
        retryPolicy({ option: null }, out),
        true,
      );
      const code = reportApply(outcome, false, out);
      if (code !== ExitCodes.Ok) return code;
      out.out(`declared the control plane: module ${CONTROL_PLANE_MODULE} and provider ${BOOTSTRAP_PROVIDER}; waiting until the mesh has satisfied it…`);
      const ready = await waitForControlPlane(store, { timeoutMs: opts.bootstrap?.readyWaitMs ?? 120_000, signal: quit.signal, onProgress: (l) => out.out(l) });
      if (!ready) return await finished;
      const moves = specs.map((spec) => {
        const node = /^agent (.+)$/.exec(spec.name)?.[1] ?? cpNode;
        const part = partOfService(spec.name);
        return { spec, binding: identityBinding(paths.bindings, node, part), records: recordsBinding(paths.bindings, node, part) };
      });
      // A Ready left from an earlier run (the store is kept) may come before this run's agents
      // have written the bindings: a service started on a missing binding would only fail.
      const serverIdentity = nats && serverAt ? identityBinding(paths.bindings, cpNode, NATS_SERVER_PART) : undefined;
      const written = await waitForIdentityBindings([...moves.map((m) => m.binding), ...(serverIdentity ? [serverIdentity] : [])], {
        timeoutMs: opts.bootstrap?.readyWaitMs ?? 120_000,
        signal: quit.signal,
      });
      if (!written) return await finished;
      if (nats && serverAt && serverIdentity) {
        tlsHolder = await holdServerCertificate({
          files: own,
          ca,
          host: serverAt.host,
          port: serverAt.port,
          url,
          identityDir: serverIdentity,
          node: cpNode,
          pid: nats.pid,
          onEvent: notify,
        });
        // Its one reload comes now, before the services move onto their identities: a reload
        // in the middle of a service's first handshake cuts that handshake off.
        await Promise.race([tlsHolder.first, pause(30_000, quit.signal)]);
        out.out(
          `the NATS server's certificate is grant ${CONTROL_PLANE_MODULE}/${ControlPlaneRequirements.natsTls} now, renewed at two thirds of its lifetime; this meshctl installs each generation and confirms once the server presents it`,
        );
      }
      for (const { spec, binding, records } of moves) {
        // Emptied, not left out: children inherit meshctl's environment, which may hold the administrator's.
        // The services check that their store is the source of record grant mesh/records names.
        const env = {
          ...spec.env,
          MESH_NATS_USER: "",
          MESH_NATS_PASSWORD_FILE: "",
          MESH_NATS_PASSWORD: "",
          MESH_NATS_CREDENTIALS: binding,
          MESH_RECORDS_BINDING: records ?? "",
        };
        await supervisor.replace({ ...spec, env }, opts.graceMs ?? 5_000);
      }
      out.out(
        `restarted ${specs.map((s) => s.name).join(", ")} with the identities the mesh granted them (their nats-* bindings under ${show(paths.bindings)})`,
      );
      if (opts.bootstrap) out.out(`as the operator, use: MESH_NATS_CREDENTIALS=${show(auth.adminCredsFile)} NATS_URL=${url} ${meshctlCommand()} status`);
      applied.push(`module/${CONTROL_PLANE_MODULE} (the control plane)`);
    }
    if (!auth) {
      // The bus as the provider of the parts' identities: on a server without authentication
      // they carry the url alone (on the mesh's own server, bootstrap's provider issues them).
      if (!nc.info?.auth_required) {
        const outcome = await sendApply(
          nc,
          [{ source: "meshctl up", documents: [busProvider({ url: busUrl, node: nodes[0]!, ...(caFile ? { caFile } : {}) })] }],
          undefined,
          retryPolicy({ option: null }, out),
        );
        const code = reportApply(outcome, false, out);
        if (code !== ExitCodes.Ok) return code;
        out.out(
          `declared provider ${BOOTSTRAP_PROVIDER}: every installed part gets its identity on this bus (binding ${IDENTITY_BINDING}), the url alone: the server has no authentication`,
        );
      } else {
        out.err(
          `the server at ${url} is not this directory's mesh (its identity comes from MESH_NATS_CREDENTIALS), so parts get no identity binding: apply a provider of ${Kinds.MeshIdentity} with that server's signing keys (examples/providers/nats.yaml)`,
        );
      }
    }
    if (files.length) {
      // Under bootstrap the resolver was just restarted on its own identity: a moment without one is ridden out.
      const outcome = await sendApply(nc, files, undefined, retryPolicy({ option: null }, out));
      const code = reportApply(outcome, false, out);
      if (code !== ExitCodes.Ok) return code;
      if (outcome.ok) applied.push(...outcome.accepted.map((a) => `${a.kind.toLowerCase()}/${a.name} ${a.action}`));
    }

    const header = () => [
      `mesh up on ${url}${nats ? ` (nats-server started here, the mesh its operator, store ${show(own.storeDir)})` : ""}`,
      `services: ${specs.map((s) => s.name).join(", ")}; logs in ${show(paths.logs)}/`,
      `bindings: ${show(paths.bindings)}/<node>/<module>/<part>/<requirement>/`,
      ...(applied.length ? [`applied: ${applied.join(", ")}`] : []),
    ];
    if (!out.isTTY) out.out("live status (one line per change; Ctrl-C stops the mesh):");
    live = await startLiveStatus(store, out, header);
    return await finished;
  } finally {
    stop.removeEventListener("abort", onStop);
    live?.stop();
    const anything = supervisor.running().length > 0 || nats !== undefined;
    if (anything) out.err("stopping the mesh… (Ctrl-C again kills everything at once)");
    await tlsHolder?.stop();
    await supervisor.stop(opts.graceMs ?? 5_000);
    await nc?.close().catch(() => undefined);
    if (nats) {
      await nats.stop(opts.graceMs ?? 5_000);
      out.err(`stopped nats-server (its store stays in ${show(own.storeDir)})`);
    }
    process.off("exit", emergency);
    if (anything) out.err("stopped.");
  }
}
