/**
 * `meshctl bootstrap`: the control plane as a consumer of its own mechanism. On a NATS whose
 * operator is the mesh (started here when none answers: decentralized JWT authentication, full
 * account resolver), the services start as the operator's admin, the control plane's own module
 * and its bootstrap provider (the mesh's NATS) are applied, and once module `mesh` is Ready
 * every service is restarted with the identity the mesh issued it (a user JWT, as a `.creds`
 * file in its own binding). From then on the admin is only the operator's.
 */
import { existsSync, readFileSync } from "node:fs";
import { isAbsolute, join } from "node:path";
import { stringify as stringifyYaml } from "yaml";
import {
  BOOTSTRAP_PROVIDER,
  CONTROL_PLANE_MODULE,
  CONTROL_PLANE_SERVICES,
  ControlPlaneRequirements,
  ModuleStatus,
  StateFiles,
  agentPart,
  bootstrapProvider,
  controlPlaneManifest,
  errorMessage,
  identityRequirement,
  type CertificateUsage,
  type ControlPlaneLayout,
  type MasterKey,
  type ProviderDoc,
} from "@mesh/shared";
import { readJson, retryJetStreamIdempotent, type Store } from "@mesh/shared/runtime";
import {
  ensureMeshCa,
  ensureOperator,
  installCertificate,
  isDnsName,
  issueCertificate,
  newPrivateKeyPem,
  operatorConfig,
  operatorFiles,
  readAuthority,
  type CaFiles,
  type OperatorFiles,
} from "@mesh/providers";
import type { ServerListen } from "@mesh/providers";
import { X509Certificate } from "node:crypto";
import { isIP } from "node:net";
import { CliError } from "./cli-error.js";
import { ExitCodes } from "./exit-codes.js";
import { pause } from "./retry.js";
import type { ManifestFile } from "./manifest-files.js";

/** The name of the operator's admin user (its JWT's name; identities are keys, not names). */
export const BOOTSTRAP_ADMIN = "mesh-admin";

/** The operator's files under the state directory: keys, JWTs, the admin's .creds, a server's config and stores. */
export function bootstrapFiles(stateDir: string): OperatorFiles {
  return operatorFiles(join(stateDir, StateFiles.operatorDir));
}

/** The admin's identity, as the environment of a process that connects with it. */
export function adminEnv(files: OperatorFiles): Record<string, string> {
  return { MESH_NATS_CREDENTIALS: files.adminCredsFile };
}

/** The documents bootstrap applies: the mesh's NATS as a provider, and the control plane's module. */
export function controlPlaneFiles(opts: {
  url: string;
  /** The bundle the server's TLS certificate is verified against (its url then `tls://`). */
  caFile?: string;
  servicesNode: string;
  nodes: readonly string[];
  files: OperatorFiles;
  replicas?: number;
  /** The certificate of the server meshctl runs, as a requirement of the control plane. */
  serverTls?: ControlPlaneLayout["serverTls"];
}): ManifestFile {
  return {
    source: "meshctl bootstrap",
    documents: [
      busProvider({ url: opts.url, node: opts.servicesNode, files: opts.files, ...(opts.caFile ? { caFile: opts.caFile } : {}) }),
      controlPlaneManifest({
        servicesNode: opts.servicesNode,
        nodes: opts.nodes,
        ...(opts.replicas ? { replicas: opts.replicas } : {}),
        ...(opts.serverTls ? { serverTls: opts.serverTls } : {}),
      }),
    ],
  };
}

/**
 * The mesh's bus as provider `mesh-nats`: with the operator's `files`, it issues identities
 * (parts', nats.user) and serves JetStream stores; without (a server that has no
 * authentication), it hands the parts identities that carry the url alone.
 */
export function busProvider(opts: {
  url: string;
  node: string;
  caFile?: string;
  files?: Pick<OperatorFiles, "signingKeysFile" | "adminCredsFile">;
}): ProviderDoc {
  const f = opts.files;
  return bootstrapProvider({
    url: opts.url,
    node: opts.node,
    ...(opts.caFile ? { caFile: opts.caFile } : {}),
    ...(f ? { auth: { signingKeysFile: f.signingKeysFile, admin: { username: BOOTSTRAP_ADMIN, passwordFile: f.adminCredsFile } } } : {}),
  });
}

/** NATS URLs (comma-separated) as servers that require TLS name them: `tls://` for each `nats://`. */
export function tlsUrl(url: string): string {
  return url.replace(/(^|,)\s*nats:/g, "$1tls:");
}

/** Where the identity of control-plane part `part` on `node` lands: its nats.user binding. */
export function identityBinding(bindingsRoot: string, node: string, part: string): string {
  return join(bindingsRoot, node, CONTROL_PLANE_MODULE, part, identityRequirement(part));
}

/** Where the source of record's binding (grant `mesh/records`) of control-plane part `part` lands; undefined for a part that does not hold it (an agent). */
export function recordsBinding(bindingsRoot: string, node: string, part: string): string | undefined {
  return (CONTROL_PLANE_SERVICES as readonly string[]).includes(part)
    ? join(bindingsRoot, node, CONTROL_PLANE_MODULE, part, ControlPlaneRequirements.records)
    : undefined;
}

/** The part a service of `meshctl up` is: `resolver` → `resolver`, `agent node-b` → `agent-node-b`. */
export function partOfService(serviceName: string): string {
  const agent = /^agent (.+)$/.exec(serviceName);
  return agent ? agentPart(agent[1]!) : serviceName;
}

/**
 * Waits until module `mesh` is Ready, calling `onProgress` with its state and message when
 * they change; throws a CliError naming what it still waits for after `timeoutMs`.
 */
export async function waitForControlPlane(
  store: Store,
  opts: { timeoutMs: number; signal: AbortSignal; onProgress: (line: string) => void },
): Promise<boolean> {
  const start = Date.now();
  let last = "";
  while (!opts.signal.aborted) {
    // A read, ridden out while JetStream does not answer (a reload of the server, such as its certificate's renewal, closes every connection).
    const s = (await retryJetStreamIdempotent(() => readJson(store.kv.modules, CONTROL_PLANE_MODULE, ModuleStatus)))?.value;
    const line = s ? `module ${CONTROL_PLANE_MODULE}: ${s.state}: ${s.message}` : `module ${CONTROL_PLANE_MODULE}: not processed yet`;
    if (line !== last) {
      opts.onProgress(line);
      last = line;
    }
    if (s?.state === "Ready") return true;
    if (Date.now() - start > opts.timeoutMs) {
      throw new CliError(
        `the control plane was not Ready within ${Math.round(opts.timeoutMs / 1000)} s (${line}); see meshctl status ${CONTROL_PLANE_MODULE} and the services' logs. Provider ${BOOTSTRAP_PROVIDER}'s services must be able to read its signing keys (under the master key) and reach the server.`,
      );
    }
    await pause(250, opts.signal);
  }
  return false;
}

/**
 * Waits until every identity binding in `dirs` has its `creds` file; throws a CliError naming
 * those still missing after `timeoutMs`, false when aborted.
 */
export async function waitForIdentityBindings(dirs: readonly string[], opts: { timeoutMs: number; signal: AbortSignal }): Promise<boolean> {
  const start = Date.now();
  while (!opts.signal.aborted) {
    const missing = dirs.filter((d) => !existsSync(join(d, "creds")));
    if (missing.length === 0) return true;
    if (Date.now() - start > opts.timeoutMs) {
      throw new CliError(
        `the agents have not written these identity bindings within ${Math.round(opts.timeoutMs / 1000)} s: ${missing.join(", ")}; see the agents' logs`,
      );
    }
    await pause(250, opts.signal);
  }
  return false;
}

/** Options of `meshctl control-plane`: the documents bootstrap applies, for a mesh set up by hand (systemd). */
export interface ControlPlaneDocsOptions {
  url: string;
  nodes: readonly string[];
  servicesNode?: string;
  /** The operator admin's `.creds`, as the provisioner reads it. */
  adminCredsFile: string;
  /** The sealed signing keys, as the provisioner and the rotator read them. */
  signingKeysFile: string;
  /** The bundle the servers' TLS certificates are verified against: the provider then names them `tls://`. */
  caFile?: string;
}

/**
 * The bootstrap provider and module `mesh` as a YAML manifest (two documents), to apply with
 * `meshctl apply -f -`; throws a CliError for a node name that cannot host the control plane
 * or a path that is not absolute.
 */
export function controlPlaneYaml(o: ControlPlaneDocsOptions): string {
  for (const [flag, p] of [
    ["--admin-creds", o.adminCredsFile],
    ["--signing-keys-file", o.signingKeysFile],
    ["--nats-ca-file", o.caFile ?? "/"],
  ] as const) {
    if (!isAbsolute(p)) throw new CliError(`${flag} ${JSON.stringify(p)} is not an absolute path; give the path on the services' host`, ExitCodes.Usage);
  }
  const servicesNode = o.servicesNode ?? o.nodes[0];
  if (!servicesNode) throw new CliError("--nodes: name at least one node", ExitCodes.Usage);
  const nodes = o.nodes.includes(servicesNode) ? o.nodes : [servicesNode, ...o.nodes];
  let docs: ManifestFile["documents"];
  try {
    docs = [
      busProvider({
        url: o.caFile ? tlsUrl(o.url) : o.url,
        node: servicesNode,
        ...(o.caFile ? { caFile: o.caFile } : {}),
        files: { signingKeysFile: o.signingKeysFile, adminCredsFile: o.adminCredsFile },
      }),
      controlPlaneManifest({ servicesNode, nodes }),
    ];
  } catch (e) {
    throw new CliError(errorMessage(e), ExitCodes.Usage);
  }
  const header = "# The control plane of the mesh, as meshctl bootstrap declares it. Apply with: meshctl apply -f FILE\n";
  return header + docs.map((d) => stringifyYaml(d)).join("---\n");
}

/** Where `meshctl nats-config` puts a server's stores unless told otherwise. */
export interface NatsConfigOptions {
  files: OperatorFiles;
  masterKey: MasterKey;
  listen: string;
  storeDir?: string;
  resolverDir?: string;
  /** A `cluster { … }` block to add, read from a file. */
  clusterFile?: string;
  /** `server_name`: a cluster member's, unique in the cluster and kept across its restarts. */
  serverName?: string;
  /**
   * TLS for clients: a server certificate the mesh's authority (`ca`, made when missing) issues
   * for `names` and puts under the operator's directory (`tls/current/…`; issued again by the
   * same command, the server takes it on SIGHUP), or the operator's own files.
   */
  tls?: { names: string[]; lifetimeMs: number; ca: CaFiles } | { certFile: string; keyFile: string; caFile?: string };
  /** Told what the server's TLS is, for stderr. */
  onTls?: (line: string) => void;
}

/** How long a server certificate `meshctl nats-config --tls-name` issues is valid unless told otherwise. */
export const NATS_SERVER_CERT_LIFETIME = "90d";

/** The server certificate and what to say of it, for {@link natsConfigText}. */
async function serverTls(o: NatsConfigOptions): Promise<{ tls?: ServerListen["tls"]; routeTls?: ServerListen["routeTls"]; said?: string }> {
  const t = o.tls;
  if (!t) return {};
  if ("certFile" in t) {
    for (const [flag, p] of [
      ["--tls-cert", t.certFile],
      ["--tls-key", t.keyFile],
      ["--tls-ca", t.caFile],
    ] as const) {
      if (p !== undefined && !isAbsolute(p))
        throw new CliError(`${flag} ${JSON.stringify(p)} is not an absolute path; give the path on the server's host`, ExitCodes.Usage);
    }
    // A cluster's routes verify each other against the authority given, when there is one.
    const routes = o.clusterFile && t.caFile ? { routeTls: { certFile: t.certFile, keyFile: t.keyFile, caFile: t.caFile } } : {};
    return {
      tls: { certFile: t.certFile, keyFile: t.keyFile, ...(t.caFile ? { caFile: t.caFile } : {}) },
      ...routes,
      said: `TLS with your certificate ${t.certFile}${o.clusterFile ? (t.caFile ? ", for clients and routes (each member verifies the others against --tls-ca)" : "; the routes stay plain TCP without --tls-ca to verify them against") : ""}`,
    };
  }
  const dnsNames = t.names.filter((n) => isIP(n) === 0);
  const ipAddresses = t.names.filter((n) => isIP(n) !== 0);
  const bad = dnsNames.find((n) => !isDnsName(n));
  if (bad !== undefined) throw new CliError(`--tls-name ${JSON.stringify(bad)} is neither a DNS name nor an IP address`, ExitCodes.Usage);
  await ensureMeshCa(t.ca, o.masterKey);
  // A cluster member's certificate is its route's client certificate too: both usages.
  const installed = await issueServerCertificate(o.files, {
    ca: t.ca,
    masterKey: o.masterKey,
    dnsNames,
    ipAddresses,
    lifetimeMs: t.lifetimeMs,
    usage: o.clusterFile ? "both" : "server",
  });
  return {
    tls: { certFile: installed.certFile, keyFile: installed.keyFile },
    ...(o.clusterFile ? { routeTls: { certFile: installed.certFile, keyFile: installed.keyFile, caFile: t.ca.certFile } } : {}),
    said:
      `server certificate ${installed.serial} of the mesh's authority for ${t.names.join(", ")}${o.clusterFile ? " (clients and routes: each member verifies the others')" : ""}, valid until ${installed.notAfter.toISOString()}, in ${join(o.files.dir, "tls", "current")}; ` +
      `give every client MESH_NATS_CA_FILE=${t.ca.certFile}. Before it expires run this again and send the server SIGHUP: the configuration does not change`,
  };
}

/** A server certificate installed for a NATS server: the files its configuration names (through `tls/current`), and what it is. */
export interface ServerCertificate {
  certFile: string;
  keyFile: string;
  serial: string;
  notBefore: Date;
  notAfter: Date;
}

/**
 * Issues a server certificate from the mesh's authority (`ca`, its key sealed under
 * `masterKey`) and installs it under the operator's directory: a new directory `tls/<serial>/`,
 * then the link `tls/current` renamed over, so a server whose configuration names
 * `tls/current/tls.crt` and `tls.key` finds both of one generation whenever it reads them.
 */
export async function issueServerCertificate(
  files: OperatorFiles,
  o: { ca: CaFiles; masterKey: MasterKey; dnsNames: string[]; ipAddresses: string[]; lifetimeMs: number; usage?: CertificateUsage },
): Promise<ServerCertificate> {
  const authority = await readAuthority(o.ca, o.masterKey);
  const keyPem = newPrivateKeyPem();
  const certPem = await issueCertificate(authority, {
    keyPem,
    dnsNames: o.dnsNames,
    ipAddresses: o.ipAddresses,
    lifetimeMs: o.lifetimeMs,
    usage: o.usage ?? "server",
  });
  return installServerCertificate(files, certPem, keyPem);
}

/** Installs a server certificate and its key under the operator's directory (`tls/<serial>/`, then `tls/current` renamed over). */
export function installServerCertificate(files: OperatorFiles, certPem: string, keyPem: string): ServerCertificate {
  const installed = installCertificate(join(files.dir, "tls"), certPem, keyPem);
  const x = new X509Certificate(certPem);
  return { ...installed, notBefore: new Date(x.validFrom), notAfter: new Date(x.validTo) };
}

/**
 * The configuration of a nats-server (or of each member of a cluster) whose operator is the
 * mesh, for a server the mesh does not start: the operator's keys are made under `files.dir`
 * when there are none (and kept when there are), and the text names the operator, the system
 * account and the full resolver. Throws a CliError for a bad `--listen` or path.
 */
export async function natsConfigText(o: NatsConfigOptions): Promise<string> {
  const m = /^(\[[^\]]+\]|[^:]+):(\d{1,5})$/.exec(o.listen);
  const port = Number(m?.[2]);
  if (!m || !(port >= 1 && port <= 65_535)) throw new CliError(`--listen ${JSON.stringify(o.listen)} is not HOST:PORT (e.g. 0.0.0.0:4222)`, ExitCodes.Usage);
  for (const [flag, p] of [
    ["--store-dir", o.storeDir],
    ["--resolver-dir", o.resolverDir],
  ] as const) {
    if (p !== undefined && !isAbsolute(p))
      throw new CliError(`${flag} ${JSON.stringify(p)} is not an absolute path; give the path on the server's host`, ExitCodes.Usage);
  }
  let cluster: string | undefined;
  if (o.clusterFile) {
    try {
      cluster = readFileSync(o.clusterFile, "utf8").trim();
    } catch (e) {
      throw new CliError(`cannot read --cluster-file ${o.clusterFile}: ${(e as NodeJS.ErrnoException).code ?? errorMessage(e)}`, ExitCodes.Usage);
    }
  }
  const pub = await ensureOperator(o.files, o.masterKey);
  const { tls, routeTls, said } = await serverTls(o);
  if (said) o.onTls?.(said);
  return operatorConfig(o.files, pub, {
    ...(tls ? { tls } : {}),
    ...(routeTls ? { routeTls } : {}),
    ...(o.serverName ? { serverName: o.serverName } : {}),
    host: m[1]!.replace(/^\[|\]$/g, ""),
    port,
    ...(o.storeDir ? { storeDir: o.storeDir } : {}),
    ...(o.resolverDir ? { resolverDir: o.resolverDir } : {}),
    ...(cluster ? { cluster } : {}),
  });
}
