/**
 * A test's own nats-server whose operator is the mesh (decentralized JWT authentication, full
 * resolver), made by the same code as `meshctl bootstrap` (@mesh/providers'
 * nats-operator-files.ts), on a free port with a temporary directory. Never the shared server.
 *
 * With `tls`, it requires TLS of every client, presenting that certificate; `url` is then
 * `tls://…`, and `presentCertificate` replaces it with a reload (SIGHUP), as an operator renews one.
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { X509Certificate, randomBytes } from "node:crypto";
import { connect, credsAuthenticator, type NatsConnection } from "@nats-io/transport-node";
import { parseMasterKey, type MasterKey, type ProviderDoc } from "@mesh/shared";
import { operatorFiles, prepareOperatorServer, type OperatorFiles, type OperatorPublic, type ProviderConfig } from "@mesh/providers";
import { startNatsServer, type NatsServer } from "./nats-server.js";
import { freePort } from "./ports.js";
import { presentedSerial, writeServerCertificate, type ServerCertificate } from "./server-certificate.js";
import { waitFor } from "./wait.js";

export interface OperatorNats {
  server: NatsServer;
  files: OperatorFiles;
  operator: OperatorPublic;
  masterKey: MasterKey;
  /** The admin's `.creds` text. */
  adminCreds: string;
  url: string;
  /** The provider as an adapter sees it (admin and master key resolved). */
  provider(over?: Partial<ProviderConfig>): ProviderConfig;
  /** The provider as a document, for a mesh whose provisioner has `env()`. */
  providerDoc(name: string, serves: ProviderDoc["serves"], over?: Partial<ProviderDoc>): ProviderDoc;
  /** Connects with a `.creds` text (the admin's by default), without reconnecting. */
  connect(creds?: string, opts?: { reconnect?: boolean }): Promise<NatsConnection>;
  /** With `tls`: presents `cert` to new connections from now on (the files replaced, then a reload); resolves once it does. */
  presentCertificate(cert: ServerCertificate): Promise<void>;
  stop(): Promise<void>;
}

export async function startOperatorNats(opts: { masterKey?: MasterKey; tls?: ServerCertificate } = {}): Promise<OperatorNats> {
  const dir = mkdtempSync(join(tmpdir(), "mesh-nats-op-"));
  const files = operatorFiles(dir);
  const masterKey = opts.masterKey ?? parseMasterKey(randomBytes(32).toString("hex"));
  const port = await freePort();
  const certFiles = { certFile: join(dir, "tls.crt"), keyFile: join(dir, "tls.key") };
  if (opts.tls) writeServerCertificate(opts.tls, certFiles);
  const operator = await prepareOperatorServer(files, masterKey, { host: "127.0.0.1", port, ...(opts.tls ? { tls: certFiles } : {}) });
  const server = await startNatsServer({ port, configFile: files.configFile, storeDir: files.storeDir });
  const adminCreds = readFileSync(files.adminCredsFile, "utf8");
  const url = opts.tls ? server.url.replace(/^nats:/, "tls:") : server.url;
  return {
    server,
    files,
    operator,
    masterKey,
    adminCreds,
    url,
    provider: (over = {}) => ({
      name: "nats-test",
      node: "node-a",
      endpoint: url,
      admin: { username: "mesh-admin", password: adminCreds },
      options: { signingKeysFile: files.signingKeysFile },
      masterKey,
      ...over,
    }),
    providerDoc: (name, serves, over = {}) => ({
      kind: "Provider",
      name,
      serves,
      node: "node-a",
      endpoint: url,
      admin: { username: "mesh-admin", passwordFile: files.adminCredsFile },
      options: { signingKeysFile: files.signingKeysFile },
      installed: true,
      ...over,
    }),
    connect: (creds = adminCreds, o = {}) =>
      connect({
        servers: url,
        reconnect: o.reconnect ?? false,
        timeout: 3_000,
        authenticator: credsAuthenticator(new TextEncoder().encode(creds)),
        ...(opts.tls ? { tls: { rejectUnauthorized: false } } : {}),
      }),
    async presentCertificate(cert) {
      if (!opts.tls) throw new Error("this server was started without tls: it presents no certificate");
      writeServerCertificate(cert, certFiles);
      process.kill(server.pid, "SIGHUP");
      const serial = new X509Certificate(cert.certPem).serialNumber;
      await waitFor("the server to present the new certificate", async () => (await presentedSerial(url)) === serial, 10_000);
    },
    async stop() {
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
