/**
 * A test's own distribution registry (Debian's `docker-registry`, installed by test/global-setup.ts
 * when missing) with token authentication, and the mesh's token issuer it trusts, both on free
 * ports with temporary directories: the registry's storage, its config file written here, and
 * the issuer's state (signing key, certificate, users, admin password). The machine's own
 * registry service, if any, is never used. `stop()` ends only the registry process it started.
 *
 * With `tls`, both serve HTTPS alone, presenting that certificate: the registry from its
 * `http.tls` files (it reads them at start, so a new certificate is a restart), the issuer from a
 * directory laid out as a `tls.certificate` binding (it reads a new one within 2 s).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { X509Certificate } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createLogger, type Logger } from "@mesh/shared/service";
import { startTokenIssuer, type TokenIssuer } from "../../services/oci-token-issuer/src/index.js";
import { freePort, waitForPort } from "./ports.js";
import { presentedSerial, writeServerCertificate, type ServerCertificate } from "./server-certificate.js";
import { waitFor } from "./wait.js";

export const OCI_REGISTRY_BIN = process.env.OCI_REGISTRY_BIN || "/usr/bin/docker-registry";
export const OCI_SERVICE = "mesh-test-registry";
export const OCI_ISSUER = "mesh-test-issuer";

export interface OwnOciRegistry {
  /** `http://127.0.0.1:<port>` (`https://` with `tls`): the provider's endpoint. */
  registryUrl: string;
  /** `http://127.0.0.1:<port>` (`https://` with `tls`): the provider's options.issuerUrl. */
  issuerUrl: string;
  admin: { username: string; password: string };
  issuer: TokenIssuer;
  dir: string;
  /** The registry's output so far (its log lines), for a failing test's message. */
  output(): string;
  /** Stops the registry process alone: the issuer, the port and the storage stay, for {@link startServer}. */
  stopServer(): Promise<void>;
  /** Starts the registry process again after {@link stopServer}, with what it stored. */
  startServer(): Promise<void>;
  /** With `tls`: both present `cert` from now on (the registry restarted with it, the issuer reading it); resolves once both do. */
  presentCertificate(cert: ServerCertificate): Promise<void>;
  stop(): Promise<void>;
}

/** Starts the issuer (tokens living `lifetimeSeconds`), then the registry trusting it; resolves once both listen. */
export async function startOwnOciRegistry(opts: { lifetimeSeconds?: number; log?: Logger; tls?: ServerCertificate } = {}): Promise<OwnOciRegistry> {
  const dir = mkdtempSync(join(tmpdir(), "mesh-oci-"));
  const tlsDir = join(dir, "tls");
  const files = { certFile: join(tlsDir, "tls.crt"), keyFile: join(tlsDir, "tls.key") };
  if (opts.tls) {
    mkdirSync(tlsDir, { mode: 0o700 });
    writeServerCertificate(opts.tls, files);
  }
  const admin = { username: "mesh-admin", password: `admin-${Math.random().toString(36).slice(2)}-${Date.now()}` };
  const issuer = await startTokenIssuer({
    stateDir: join(dir, "issuer"),
    admin,
    service: OCI_SERVICE,
    issuer: OCI_ISSUER,
    log: opts.log ?? createLogger("oci-token-issuer", { level: "warn" }),
    ...(opts.lifetimeSeconds ? { lifetimeSeconds: opts.lifetimeSeconds } : {}),
    ...(opts.tls ? { tlsDir } : {}),
  });
  const port = await freePort();
  const config = join(dir, "config.yml");
  writeFileSync(
    config,
    [
      "version: 0.1",
      "log: { level: warn, accesslog: { disabled: true } }",
      `storage: { filesystem: { rootdirectory: ${JSON.stringify(join(dir, "storage"))} } }`,
      `http: { addr: "127.0.0.1:${port}"${opts.tls ? `, tls: { certificate: ${JSON.stringify(files.certFile)}, key: ${JSON.stringify(files.keyFile)} }` : ""} }`,
      "auth:",
      "  token:",
      `    realm: "${issuer.url}/token"`,
      `    service: ${OCI_SERVICE}`,
      `    issuer: ${OCI_ISSUER}`,
      `    rootcertbundle: ${JSON.stringify(issuer.certificatePath)}`,
      "",
    ].join("\n"),
  );
  let output = "";
  let child: ChildProcess | undefined;
  /** Starts the registry process on the port and storage above; resolves once it listens. */
  const startServer = async () => {
    const c = spawn(OCI_REGISTRY_BIN, ["serve", config], { cwd: dir, stdio: ["ignore", "pipe", "pipe"] });
    child = c;
    c.stdout!.on("data", (d: Buffer) => (output = (output + d.toString()).slice(-8_000)));
    c.stderr!.on("data", (d: Buffer) => (output = (output + d.toString()).slice(-8_000)));
    await new Promise<void>((resolve, reject) => {
      c.once("error", (e) =>
        reject(new Error(`cannot run ${OCI_REGISTRY_BIN} (${e.message}); install it with apt-get install -y docker-registry, or set OCI_REGISTRY_BIN`)),
      );
      c.once("spawn", resolve);
    });
    await waitForPort(port, 20_000);
  };
  /** Stops the registry process alone (the issuer and the storage stay). */
  const stopServer = async () => {
    const c = child;
    if (!c || c.exitCode !== null || c.signalCode !== null) return;
    const exited = new Promise((r) => c.once("exit", r));
    c.kill("SIGTERM");
    await Promise.race([exited, new Promise((r) => setTimeout(r, 5_000))]);
    if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  };
  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    await stopServer();
    await issuer.close();
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    await startServer();
  } catch (e) {
    await stop();
    throw new Error(`the test's registry did not start: ${(e as Error).message}\n${output}`, { cause: e });
  }
  const registryUrl = `${opts.tls ? "https" : "http"}://127.0.0.1:${port}`;
  const presentCertificate = async (cert: ServerCertificate) => {
    if (!opts.tls) throw new Error("this registry was started without tls: it presents no certificate");
    writeServerCertificate(cert, files);
    await stopServer();
    await startServer();
    const serial = new X509Certificate(cert.certPem).serialNumber;
    await waitFor("the token issuer to present the new certificate", async () => (await presentedSerial(issuer.url)) === serial, 10_000);
  };
  return { registryUrl, issuerUrl: issuer.url, admin, issuer, dir, output: () => output, stopServer, startServer, presentCertificate, stop };
}

/**
 * The Provider document of the oci.registry `registry` serves, named `name` on node-a, with the
 * token issuer's admin password in a file of its own under `dir` (0600), as an operator keeps it.
 */
export function ociRegistryProvider(registry: OwnOciRegistry, name: string, dir: string) {
  const passwordFile = join(dir, `${name}-admin-password`);
  writeFileSync(passwordFile, `${registry.admin.password}\n`, { mode: 0o600 });
  return {
    kind: "Provider",
    name,
    serves: ["oci.registry"],
    node: "node-a",
    endpoint: registry.registryUrl,
    admin: { username: registry.admin.username, passwordFile },
    options: { issuerUrl: registry.issuerUrl },
    installed: true,
  };
}
