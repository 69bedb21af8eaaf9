/**
 * `meshctl console [--listen 127.0.0.1:PORT]`: a read-only web console of the mesh, live from
 * its KV buckets. The first line printed is the URL to open, with the token every request must
 * carry (as Jupyter prints its own).
 */
import { X509Certificate, randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import type { Server as HttpsServer } from "node:https";
import { isIP } from "node:net";
import { consoleAuditSubject, errorMessage, requesterName, type MasterKey } from "@mesh/shared";
import { issueCertificate, newPrivateKeyPem, readAuthority, type CaFiles } from "@mesh/providers";
import { AuditLog, type Store } from "@mesh/shared/runtime";
import { CliError } from "../cli-error.js";
import { DEFAULT_CONSOLE_LISTEN, allowedHosts, checkListen, hostForUrl, isLoopback, parseListen, type ListenAddress } from "./access.js";
import { createConsoleServer, type ConsoleServer } from "./server.js";
import { startConsoleState, type ConsoleState } from "./state.js";
import { ExitCodes } from "../exit-codes.js";
import type { Output } from "../output.js";
import { operatorOf } from "../operator-identity.js";

export interface ConsoleOptions {
  /** `HOST:PORT`; default {@link DEFAULT_CONSOLE_LISTEN}. */
  listen?: string;
  /** PEM files: required to listen beyond loopback. */
  tlsCert?: string;
  tlsKey?: string;
  /** Host names (with no port) clients use to reach a console listening beyond loopback. */
  hostNames?: string[];
  /**
   * The mesh's certificate authority (what `meshctl up` made in its state directory): beyond
   * loopback without `tlsCert`, the console serves HTTPS with a certificate of its own from it,
   * for its address and `hostNames`, renewed while it runs.
   */
  authority?: { files: Pick<CaFiles, "certFile" | "keyFile">; masterKey: MasterKey };
}

/** How long the console's own certificate is valid; it is issued again after two thirds of it. */
export const CONSOLE_CERTIFICATE_LIFETIME_MS = 24 * 3600_000;

/** A certificate of the mesh's authority for the console at `addr` reached by `names`. */
async function consoleCertificate(
  authority: NonNullable<ConsoleOptions["authority"]>,
  addr: ListenAddress,
  names: readonly string[],
): Promise<{ cert: string; key: string; notAfter: string }> {
  const ca = await readAuthority(authority.files, authority.masterKey).catch((e: unknown) => {
    throw new CliError(`cannot issue the console's certificate: the mesh's authority (${authority.files.certFile}) does not open: ${errorMessage(e)}`);
  });
  const wildcard = addr.host === "0.0.0.0" || addr.host === "::";
  const ipAddresses = !wildcard && isIP(addr.host) ? [addr.host] : [];
  const dnsNames = [...new Set([...(!wildcard && !isIP(addr.host) ? [addr.host] : []), ...names].map((n) => n.toLowerCase()))];
  const key = newPrivateKeyPem();
  const cert = await issueCertificate(ca, { keyPem: key, dnsNames, ipAddresses, lifetimeMs: CONSOLE_CERTIFICATE_LIFETIME_MS, usage: "server" });
  return { cert, key, notAfter: new Date(new X509Certificate(cert).validTo).toISOString() };
}

/** A console that runs. */
export interface RunningConsole {
  /** The URL to open, with the token. */
  url: string;
  token: string;
  state: ConsoleState;
  server: ConsoleServer;
  /** When it serves a certificate of the mesh's authority: until when, and the authority's bundle a browser must trust. */
  ownCertificate?: { notAfter: string; caFile: string };
  stop(): Promise<void>;
}

function readPem(option: string, path: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch (e) {
    throw new CliError(`${option} ${path}: cannot read it (${errorMessage(e)}); give a PEM file meshctl can read`, ExitCodes.Usage);
  }
}

function listenOn(server: ConsoleServer, addr: ListenAddress): Promise<void> {
  return new Promise((resolve, reject) => {
    const onError = (e: NodeJS.ErrnoException) => {
      const why =
        e.code === "EADDRINUSE"
          ? `port ${addr.port} is taken on ${addr.host}: give another with --listen ${hostForUrl(addr.host)}:PORT (port 0 picks a free one)`
          : e.code === "EADDRNOTAVAIL"
            ? `${addr.host} is no address of this machine: give one it has, e.g. --listen ${DEFAULT_CONSOLE_LISTEN}`
            : `${errorMessage(e)}: give another --listen address`;
      reject(new CliError(`cannot listen on ${hostForUrl(addr.host)}:${addr.port}: ${why}`));
    };
    server.server.once("error", onError);
    server.server.listen(addr.port, addr.host, () => {
      server.server.off("error", onError);
      resolve();
    });
  });
}

/**
 * The address to listen on, once the options are found consistent: refuses (exit 2) an
 * address beyond loopback without TLS, half of the TLS pair, and a wildcard address without
 * `hostNames`. Meant to run before anything connects.
 */
export function checkConsoleOptions(opts: ConsoleOptions): ListenAddress {
  const addr = parseListen(opts.listen ?? DEFAULT_CONSOLE_LISTEN);
  const tlsGiven = Boolean(opts.tlsCert || opts.tlsKey);
  if (tlsGiven && !(opts.tlsCert && opts.tlsKey)) throw new CliError("give both --tls-cert and --tls-key, or neither", ExitCodes.Usage);
  checkListen(addr, tlsGiven || opts.authority !== undefined);
  if ((addr.host === "0.0.0.0" || addr.host === "::") && !opts.hostNames?.length) {
    throw new CliError(
      `--listen ${addr.host} is every address: name the host name clients use with --host NAME, so requests for other names are refused`,
      ExitCodes.Usage,
    );
  }
  return addr;
}

/** Checks the options, reads the mesh's state, then listens; the URL is known once it listens. */
export async function startConsole(store: Store, opts: ConsoleOptions = {}): Promise<RunningConsole> {
  const addr = checkConsoleOptions(opts);
  const names = opts.hostNames ?? [];
  const own = !opts.tlsCert && !isLoopback(addr.host) && opts.authority ? await consoleCertificate(opts.authority, addr, names) : undefined;
  const tls = opts.tlsCert && opts.tlsKey ? { cert: readPem("--tls-cert", opts.tlsCert), key: readPem("--tls-key", opts.tlsKey) } : own;
  const token = randomBytes(24).toString("base64url");
  const state = await startConsoleState(store);
  // The access policy needs the port, known only once listening; it is filled in before the first request is answered.
  const access = { token, hosts: new Set<string>(), scheme: tls ? ("https" as const) : ("http" as const) };
  const server = createConsoleServer({ state, access, ...(tls ? { tls } : {}) });
  try {
    await listenOn(server, addr);
  } catch (e) {
    state.stop();
    throw e;
  }
  // Its own certificate is issued again after two thirds of its life; open connections keep theirs.
  const renewal = own
    ? setInterval(
        () =>
          void consoleCertificate(opts.authority!, addr, names).then(
            (next) => (server.server as HttpsServer).setSecureContext({ cert: next.cert, key: next.key }),
            () => undefined, // the current one is valid for a third of its life still: tried again at the next turn
          ),
        (CONSOLE_CERTIFICATE_LIFETIME_MS * 2) / 3,
      )
    : undefined;
  renewal?.unref();
  const port = server.port();
  for (const h of allowedHosts(addr, port, names)) access.hosts.add(h);
  const shownHost = addr.host === "0.0.0.0" || addr.host === "::" ? names[0]! : hostForUrl(addr.host);
  return {
    url: `${access.scheme}://${shownHost}:${port}/?token=${token}`,
    token,
    state,
    server,
    ...(own && opts.authority ? { ownCertificate: { notAfter: own.notAfter, caFile: opts.authority.files.certFile } } : {}),
    async stop() {
      if (renewal) clearInterval(renewal);
      state.stop();
      await server.close();
    },
  };
}

/** Runs the console until `signal` aborts or the connection to NATS ends; returns the exit code. */
export async function runConsole(store: Store, opts: ConsoleOptions, out: Output, signal: AbortSignal): Promise<number> {
  // The session is in the audit trail before anything is served, under the subject of whoever runs it.
  const operator = operatorOf(store.nc);
  const trail = new AuditLog(store.nc, "console", undefined, undefined, consoleAuditSubject(operator));
  const session = { id: AuditLog.newId(), who: requesterName(operator ? { kind: "operator", name: operator } : { kind: "admin" }), action: "console" };
  try {
    await trail.record({ ...session, phase: "request" });
  } catch (e) {
    throw new CliError(`the console was not started: ${errorMessage(e)}`, ExitCodes.Failure, { cause: e, retryable: true });
  }
  const c = await startConsole(store, opts);
  out.out(c.url);
  if (c.ownCertificate) {
    out.err(
      `meshctl console: serving HTTPS with a certificate of the mesh's authority (valid until ${c.ownCertificate.notAfter}, issued again while it runs); a browser trusts it once it trusts ${c.ownCertificate.caFile}`,
    );
  }
  out.err(
    `meshctl console: serving the mesh at ${store.nc.getServer()} read-only; open the URL above (its token is needed for every request). Ctrl-C stops it.`,
  );
  const aborted = new Promise<"signal">((resolve) =>
    signal.aborted ? resolve("signal") : signal.addEventListener("abort", () => resolve("signal"), { once: true }),
  );
  const why = await Promise.race([aborted, c.state.closed.then(() => "closed" as const)]);
  await c.stop();
  // Its end, when NATS still answers (a session whose end is not recorded shows its outcome as unknown).
  if (why !== "closed") await trail.record({ ...session, phase: "outcome", outcome: "ok", message: "the console stopped" }).catch(() => undefined);
  if (why === "closed") {
    throw new CliError(`the connection to NATS at ${store.nc.getServer()} ended, so the console stopped; start it again once the server runs`);
  }
  return ExitCodes.Ok;
}
