/**
 * `meshctl bootstrap`: the control plane as a consumer of its own mechanism. On a NATS with
 * authentication (started here when none answers), the services start as the bootstrap
 * administrator, the control plane's own module and its bootstrap provider (the mesh's NATS)
 * are applied, and once module `mesh` is Ready every service is restarted with the broker
 * identity the mesh granted it, read from its own binding. From then on the administrator is
 * only the operator's.
 */
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { isAbsolute, join } from "node:path";
import { stringify as stringifyYaml } from "yaml";
import {
  BOOTSTRAP_PROVIDER,
  CONTROL_PLANE_MODULE,
  ModuleStatus,
  agentPart,
  bootstrapProvider,
  controlPlaneManifest,
  errorMessage,
  generateSecret,
  identityRequirement,
  readJson,
  type Store,
} from "@mesh/shared";
import { initNatsUsersFile } from "@mesh/providers";
import { CliError } from "./cli-error.js";
import { ExitCodes } from "./exit-codes.js";
import type { ManifestFile } from "./manifest-files.js";

/** The bootstrap administrator's user name on a NATS that bootstrap set up. */
export const BOOTSTRAP_ADMIN = "mesh-admin";

/** The files of a NATS with authentication that bootstrap sets up under the state directory. */
export interface AuthNatsFiles {
  dir: string;
  configFile: string;
  /** Included by the config; its users are the nats.user provider's to render. */
  usersFile: string;
  pidFile: string;
  adminPasswordFile: string;
  storeDir: string;
}

export function authNatsFiles(stateDir: string): AuthNatsFiles {
  const dir = join(stateDir, "nats-auth");
  return {
    dir,
    configFile: join(dir, "server.conf"),
    usersFile: join(dir, "users.conf"),
    pidFile: join(dir, "nats.pid"),
    adminPasswordFile: join(dir, "admin.password"),
    storeDir: join(dir, "store"),
  };
}

/** The administrator's identity, as the environment of a process that connects with it. */
export function adminEnv(files: AuthNatsFiles): Record<string, string> {
  return { MESH_NATS_USER: BOOTSTRAP_ADMIN, MESH_NATS_PASSWORD_FILE: files.adminPasswordFile };
}

/** The administrator's password, created (0600) when there is none yet. */
export function adminPassword(files: AuthNatsFiles): string {
  mkdirSync(files.dir, { recursive: true, mode: 0o700 });
  if (!existsSync(files.adminPasswordFile)) writeFileSync(files.adminPasswordFile, `${generateSecret(24)}\n`, { mode: 0o600, flag: "wx" });
  chmodSync(files.adminPasswordFile, 0o600);
  return readFileSync(files.adminPasswordFile, "utf8").trim();
}

/**
 * Writes what a nats-server with authentication needs before it starts: the admin's password,
 * the users file with the admin in it (the config includes it, so it must exist), and the
 * config itself, which listens on `host:port` and names the pid file the nats.user provider
 * signals after each change of the users file.
 */
export async function prepareAuthNats(files: AuthNatsFiles, listen: { host: string; port: number; monitorPort?: number }): Promise<void> {
  const password = adminPassword(files);
  mkdirSync(files.storeDir, { recursive: true, mode: 0o700 });
  await initNatsUsersFile(files.usersFile, { username: BOOTSTRAP_ADMIN, password });
  const conf = [
    "# Written by meshctl bootstrap. The users are in users.conf, which the mesh renders:",
    "# the administrator, and one user per nats.user grant. Do not edit users.conf by hand.",
    `listen: ${JSON.stringify(`${listen.host}:${listen.port}`)}`,
    ...(listen.monitorPort ? [`http: ${JSON.stringify(`${listen.host}:${listen.monitorPort}`)}`] : []),
    `pid_file: ${JSON.stringify(files.pidFile)}`,
    `jetstream { store_dir: ${JSON.stringify(files.storeDir)} }`,
    `include ${JSON.stringify("./users.conf")}`,
    "",
  ].join("\n");
  writeFileSync(files.configFile, conf, { mode: 0o600 });
}

/** The documents bootstrap applies: the mesh's NATS as a provider, and the control plane's module. */
export function controlPlaneFiles(opts: { url: string; servicesNode: string; nodes: readonly string[]; files: AuthNatsFiles }): ManifestFile {
  return {
    source: "meshctl bootstrap",
    documents: [
      bootstrapProvider({
        url: opts.url,
        node: opts.servicesNode,
        usersFile: opts.files.usersFile,
        pidFile: opts.files.pidFile,
        admin: { username: BOOTSTRAP_ADMIN, passwordFile: opts.files.adminPasswordFile },
      }),
      controlPlaneManifest({ servicesNode: opts.servicesNode, nodes: opts.nodes }),
    ],
  };
}

/** Where the identity of control-plane part `part` on `node` lands: its nats.user binding. */
export function identityBinding(bindingsRoot: string, node: string, part: string): string {
  return join(bindingsRoot, node, CONTROL_PLANE_MODULE, part, identityRequirement(part));
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
    const s = (await readJson(store.kv.modules, CONTROL_PLANE_MODULE, ModuleStatus))?.value;
    const line = s ? `module ${CONTROL_PLANE_MODULE}: ${s.state}: ${s.message}` : `module ${CONTROL_PLANE_MODULE}: not processed yet`;
    if (line !== last) {
      opts.onProgress(line);
      last = line;
    }
    if (s?.state === "Ready") return true;
    if (Date.now() - start > opts.timeoutMs) {
      throw new CliError(
        `the control plane was not Ready within ${Math.round(opts.timeoutMs / 1000)} s (${line}); see meshctl status ${CONTROL_PLANE_MODULE} and the services' logs. Provider ${BOOTSTRAP_PROVIDER} must be able to write the users file and signal the server.`,
      );
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  return false;
}

/**
 * Waits until every identity binding in `dirs` has its `username` and `password` files;
 * throws a CliError naming those still missing after `timeoutMs`, false when aborted.
 */
export async function waitForIdentityBindings(dirs: readonly string[], opts: { timeoutMs: number; signal: AbortSignal }): Promise<boolean> {
  const start = Date.now();
  while (!opts.signal.aborted) {
    const missing = dirs.filter((d) => !existsSync(join(d, "username")) || !existsSync(join(d, "password")));
    if (missing.length === 0) return true;
    if (Date.now() - start > opts.timeoutMs) {
      throw new CliError(`the agents have not written these identity bindings within ${Math.round(opts.timeoutMs / 1000)} s: ${missing.join(", ")}; see the agents' logs`);
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  return false;
}

/** Options of `meshctl control-plane`: the documents bootstrap applies, for a mesh set up by hand (systemd). */
export interface ControlPlaneDocsOptions {
  url: string;
  nodes: readonly string[];
  servicesNode?: string;
  usersFile: string;
  pidFile: string;
  adminUser: string;
  adminPasswordFile: string;
}

/**
 * The bootstrap provider and module `mesh` as a YAML manifest (two documents), to apply with
 * `meshctl apply -f -`; throws a CliError for a node name that cannot host the control plane
 * or a path that is not absolute.
 */
export function controlPlaneYaml(o: ControlPlaneDocsOptions): string {
  for (const [flag, p] of [["--users-file", o.usersFile], ["--pid-file", o.pidFile], ["--admin-password-file", o.adminPasswordFile]] as const) {
    if (!isAbsolute(p)) throw new CliError(`${flag} ${JSON.stringify(p)} is not an absolute path; give the path on the NATS server's host`, ExitCodes.Usage);
  }
  const servicesNode = o.servicesNode ?? o.nodes[0];
  if (!servicesNode) throw new CliError("--nodes: name at least one node", ExitCodes.Usage);
  const nodes = o.nodes.includes(servicesNode) ? o.nodes : [servicesNode, ...o.nodes];
  let docs: ManifestFile["documents"];
  try {
    docs = [
      bootstrapProvider({ url: o.url, node: servicesNode, usersFile: o.usersFile, pidFile: o.pidFile, admin: { username: o.adminUser, passwordFile: o.adminPasswordFile } }),
      controlPlaneManifest({ servicesNode, nodes }),
    ];
  } catch (e) {
    throw new CliError(errorMessage(e), ExitCodes.Usage);
  }
  const header = "# The control plane of the mesh, as meshctl bootstrap declares it. Apply with: meshctl apply -f FILE\n";
  return header + docs.map((d) => stringifyYaml(d)).join("---\n");
}

/**
 * Writes a NATS users file with the administrator in it (its password read from
 * `adminPasswordFile`), for a server whose config includes it; keeps the users already
 * recorded beside it. Returns the revision written.
 */
export async function initUsersFile(o: { usersFile: string; adminUser: string; adminPasswordFile: string }): Promise<string> {
  let password: string;
  try {
    password = readFileSync(o.adminPasswordFile, "utf8").trim();
  } catch (e) {
    throw new CliError(`cannot read --admin-password-file ${o.adminPasswordFile}: ${(e as NodeJS.ErrnoException).code ?? errorMessage(e)}`);
  }
  if (!password) throw new CliError(`--admin-password-file ${o.adminPasswordFile} is empty; write the administrator's password into it (e.g. openssl rand -base64 32)`);
  try {
    return await initNatsUsersFile(o.usersFile, { username: o.adminUser, password });
  } catch (e) {
    throw new CliError(`cannot write the users file ${o.usersFile}: ${errorMessage(e)}`, undefined, { cause: e });
  }
}
