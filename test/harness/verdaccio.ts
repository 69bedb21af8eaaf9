/**
 * A test's own Verdaccio (6.8.0, the npm registry the `npm.registry` kind is built for) with
 * the mesh's auth plugin (deploy/verdaccio/plugins/verdaccio-mesh-scopes), on 127.0.0.1 on a
 * free port, with its config, storage and users directory in a fresh temporary directory.
 * It has no uplink: nothing a test does reaches the public registry.
 *
 * Verdaccio is not a devDependency of the project: it brings ~330 packages (express 4, lodash,
 * a web UI…) into every `npm ci` and an `overrides` entry (node-fetch 2.7.0, which 6.8.0 needs
 * on Node 20) that would apply to the whole workspace. It is installed instead, once per
 * machine, by {@link ensureVerdaccio}: `npm ci --ignore-scripts` of the pinned lock file in
 * test/harness/verdaccio/ into a cache directory named after the lock file's hash (none of its
 * packages has an install script). Concurrent installs each go to a directory of their own
 * and are renamed into place, so two test files starting at once never see half an install.
 *
 * With `tls`, it serves HTTPS alone, presenting that certificate (read at start: a new one is a
 * restart on the same port and storage).
 *
 * stop() ends only the server it started (by its PID) and removes the directory.
 */
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { once } from "node:events";
import { get as httpGet } from "node:http";
import { get as httpsGet } from "node:https";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { freePort } from "./ports.js";
import { writeServerCertificate, type ServerCertificate } from "./server-certificate.js";

const run = promisify(execFile);
const repo = fileURLToPath(new URL("../..", import.meta.url));
/** The pinned install: package.json (verdaccio 6.8.0, the node-fetch override) and its lock file. */
const INSTALL_DIR = join(repo, "test/harness/verdaccio");
/** The plugins directory Verdaccio is pointed at (`plugins:`), holding `verdaccio-mesh-scopes`. */
export const VERDACCIO_PLUGINS_DIR = join(repo, "deploy/verdaccio/plugins");
/** How long an install may take (seen here: ~30 s on a busy machine with a cold npm cache). */
export const VERDACCIO_INSTALL_TIMEOUT_MS = 240_000;
/** How long Verdaccio may take to answer /-/ping after it was spawned. */
const START_TIMEOUT_MS = 30_000;

/** Where the pinned Verdaccio is installed: `MESH_TEST_VERDACCIO_DIR`, else a directory of the tmpdir named after the lock file. */
export function verdaccioCacheDir(): string {
  if (process.env.MESH_TEST_VERDACCIO_DIR) return process.env.MESH_TEST_VERDACCIO_DIR;
  const lock = readFileSync(join(INSTALL_DIR, "package-lock.json"));
  return join(tmpdir(), `mesh-test-verdaccio-${createHash("sha256").update(lock).digest("hex").slice(0, 12)}`);
}

/** Installs the pinned Verdaccio into {@link verdaccioCacheDir} unless it is there; returns the path of its CLI. */
export async function ensureVerdaccio(): Promise<string> {
  const dir = verdaccioCacheDir();
  const bin = join(dir, "node_modules/verdaccio/bin/verdaccio");
  if (existsSync(bin)) return bin;
  const staging = `${dir}.tmp-${process.pid}-${randomBytes(4).toString("hex")}`;
  mkdirSync(staging, { recursive: true });
  try {
    for (const f of ["package.json", "package-lock.json"]) copyFileSync(join(INSTALL_DIR, f), join(staging, f));
    await run("npm", ["ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"], {
      cwd: staging,
      timeout: VERDACCIO_INSTALL_TIMEOUT_MS,
      env: { ...process.env, npm_config_workspaces: "false" },
    }).catch((e: Error & { stderr?: string }) => {
      throw new Error(
        `installing Verdaccio 6.8.0 for the npm.registry tests into ${staging} failed (npm ci of test/harness/verdaccio: it needs the npm registry, or set MESH_TEST_VERDACCIO_DIR to an install): ${e.stderr || e.message}`,
      );
    });
    try {
      renameSync(staging, dir);
    } catch (e) {
      // Another test file installed it meanwhile: use that one.
      if (!existsSync(bin)) throw e;
    }
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
  return bin;
}

export interface OwnVerdaccio {
  port: number;
  /** `http://127.0.0.1:<port>` (`https://` with `tls`), as a Provider document's `endpoint`. */
  endpoint: string;
  /** The directory the mesh's plugin reads users from, as the provider's `options.usersDir`. */
  usersDir: string;
  /** Verdaccio's storage: the packages published. */
  storageDir: string;
  /** What Verdaccio wrote to stdout and stderr (its last 20 000 characters), for a failing test's message. */
  output(): string;
  /** With `tls`: presents `cert` from now on (restarted with it); resolves once it answers again. */
  presentCertificate(cert: ServerCertificate): Promise<void>;
  /** Stops the server (SIGTERM, SIGKILL after 10 s) and removes its directory. Idempotent. */
  stop(): Promise<void>;
}

/** Starts a Verdaccio (installing it first if needed) and resolves once it answers /-/ping. */
export async function startOwnVerdaccio(opts: { tls?: ServerCertificate } = {}): Promise<OwnVerdaccio> {
  const bin = await ensureVerdaccio();
  const dir = mkdtempSync(join(tmpdir(), "mesh-verdaccio-"));
  const port = await freePort();
  const usersDir = join(dir, "users");
  const storageDir = join(dir, "storage");
  mkdirSync(usersDir, { mode: 0o750 });
  mkdirSync(storageDir);
  const https = opts.tls ? { certFile: join(dir, "tls.crt"), keyFile: join(dir, "tls.key") } : undefined;
  if (opts.tls) writeServerCertificate(opts.tls, https!);
  const configFile = join(dir, "config.yaml");
  writeFileSync(configFile, verdaccioConfig({ storageDir, usersDir, port, ...(https ? { https } : {}) }));
  const endpoint = `${https ? "https" : "http"}://127.0.0.1:${port}`;
  let out = "";
  let proc: ChildProcess | undefined;

  /** Stops the process alone (SIGTERM, SIGKILL after 10 s). */
  const halt = async () => {
    const p = proc;
    if (!p || p.exitCode !== null || p.signalCode !== null) return;
    const exited = once(p, "exit");
    p.kill("SIGTERM");
    const timer = setTimeout(() => p.kill("SIGKILL"), 10_000);
    await exited;
    clearTimeout(timer);
  };
  const stop = async () => {
    await halt();
    rmSync(dir, { recursive: true, force: true });
  };
  /** Spawns Verdaccio on the port, storage and certificate files above; resolves once it answers /-/ping (whatever certificate it presents). */
  const launch = async () => {
    const p = spawn(process.execPath, [bin, "--config", configFile], {
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, NODE_ENV: "production" },
    });
    proc = p;
    const keep = (d: Buffer) => (out = (out + d.toString()).slice(-20_000));
    p.stdout!.on("data", keep);
    p.stderr!.on("data", keep);
    const deadline = Date.now() + START_TIMEOUT_MS;
    for (;;) {
      if (p.exitCode !== null) throw new Error(`Verdaccio exited (${p.exitCode}) before answering: ${out}`);
      const ok = await answersPing(endpoint);
      if (ok) return;
      if (Date.now() > deadline) throw new Error(`Verdaccio did not answer ${endpoint}/-/ping within ${START_TIMEOUT_MS} ms: ${out}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  };
  const presentCertificate = async (cert: ServerCertificate) => {
    if (!https) throw new Error("this Verdaccio was started without tls: it presents no certificate");
    writeServerCertificate(cert, https);
    await halt();
    await launch();
  };
  try {
    await launch();
  } catch (e) {
    await stop();
    throw e;
  }
  return { port, endpoint, usersDir, storageDir, output: () => out, presentCertificate, stop };
}

/** Whether the registry at `endpoint` answers `/-/ping` with 200 within a second; over HTTPS, whatever its certificate (the harness waits for it to listen; the tests verify). */
function answersPing(endpoint: string): Promise<boolean> {
  return new Promise((resolve) => {
    const req = (endpoint.startsWith("https:") ? httpsGet : httpGet)(`${endpoint}/-/ping`, { timeout: 1_000, rejectUnauthorized: false }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.on("timeout", () => req.destroy(new Error("timeout")));
    req.on("error", () => resolve(false));
  });
}

/**
 * The config the tests run Verdaccio with: the mesh's auth plugin decides every login and every
 * access (it answers each request itself, so the `packages:` rule below, which would let any
 * logged-in user in, is never reached), no uplink, no web UI.
 */
export function verdaccioConfig(o: { storageDir: string; usersDir: string; port: number; https?: { certFile: string; keyFile: string } }): string {
  return [
    `storage: ${JSON.stringify(o.storageDir)}`,
    `plugins: ${JSON.stringify(VERDACCIO_PLUGINS_DIR)}`,
    `listen: ${o.https ? "https://" : ""}127.0.0.1:${o.port}`,
    ...(o.https ? ["https:", `  key: ${JSON.stringify(o.https.keyFile)}`, `  cert: ${JSON.stringify(o.https.certFile)}`] : []),
    "auth:",
    "  mesh-scopes:",
    `    usersDir: ${JSON.stringify(o.usersDir)}`,
    "uplinks: {}",
    "packages:",
    "  '**':",
    "    access: $authenticated",
    "    publish: $authenticated",
    "    unpublish: $authenticated",
    "web:",
    "  enable: false",
    "log: { type: stdout, format: json, level: warn }",
    "",
  ].join("\n");
}
