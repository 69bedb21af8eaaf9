/**
 * `meshctl nats-config --tls-name` for a server the mesh does not start: the configuration names
 * `tls/current/…` under the operator's directory, where a certificate of the mesh's authority is
 * put; nats-server (Debian's 2.9.10, one of the test's own) serves it to clients given the
 * authority's bundle. Run again, the command puts a new certificate there and prints the same
 * configuration; after SIGHUP the server presents the new serial to a new connection, and a
 * connection open across the reload stays open and keeps working.
 */
import { readFileSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { connect as tcpConnect } from "node:net";
import { connect as tlsConnect } from "node:tls";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { parseMasterKey } from "@mesh/shared";
import { connectNats, jwtAuthenticator, type NatsConnection } from "@mesh/shared/runtime";
import { caFiles, operatorFiles } from "@mesh/providers";
import { natsConfigText } from "../packages/cli/src/bootstrap.js";
import { startNatsServer, type NatsServer } from "./harness/nats-server.js";
import { freePort } from "./harness/ports.js";
import { waitFor } from "./harness/wait.js";

const dir = mkdtempSync(join(tmpdir(), "mesh-nats-config-tls-"));
const masterKey = parseMasterKey(Buffer.alloc(32, 5).toString("hex"));
const files = operatorFiles(join(dir, "nats-operator"));
const ca = caFiles(join(dir, "mesh-ca"));
let server: NatsServer | undefined;
let nc: NatsConnection | undefined;
afterAll(async () => {
  await nc?.close();
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** The serial of the certificate the server presents to a new client: INFO in the clear, then the TLS handshake on that socket. */
function servedSerial(port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const raw = tcpConnect(port, "127.0.0.1");
    raw.once("data", () => {
      const s = tlsConnect({ socket: raw, ca: readFileSync(ca.certFile), servername: "localhost" }, () => {
        resolve(s.getPeerCertificate().serialNumber);
        s.destroy();
      });
      s.on("error", reject);
    });
    raw.on("error", reject);
  });
}

describe("meshctl nats-config --tls-name", () => {
  it("serves a certificate of the mesh's authority, renewed in place and reloaded on SIGHUP without a change to the configuration", async () => {
    const port = await freePort();
    const said: string[] = [];
    const config = (): Promise<string> =>
      natsConfigText({
        files,
        masterKey,
        listen: `127.0.0.1:${port}`,
        storeDir: join(dir, "store"),
        tls: { names: ["localhost", "127.0.0.1"], lifetimeMs: 3600_000, ca },
        onTls: (l) => said.push(l),
      });
    const first = await config();
    expect(first).toContain(
      `tls { cert_file: "${join(files.dir, "tls", "current", "tls.crt")}", key_file: "${join(files.dir, "tls", "current", "tls.key")}", timeout: 5 }`,
    );
    expect(said[0]).toMatch(
      /server certificate \w+ of the mesh's authority for localhost, 127\.0\.0\.1, valid until .*MESH_NATS_CA_FILE=.*mesh-ca\/ca\.crt.*SIGHUP/,
    );
    const configFile = join(dir, "server.conf");
    writeFileSync(configFile, first);
    server = await startNatsServer({ port, configFile, storeDir: join(dir, "store") });

    const firstSerial = await servedSerial(port);
    process.env.MESH_NATS_CA_FILE = ca.certFile;
    try {
      // As the mesh's clients log in: the JWT and its signature, no nkey (with one, nats-server
      // 2.9.10 closes the connection at every reload).
      nc = await connectNats(server.url, { authenticator: jwtAuthenticator(readFileSync(files.adminCredsFile)), maxReconnectAttempts: 0 });
    } finally {
      delete process.env.MESH_NATS_CA_FILE;
    }
    await nc.flush();

    // Issued again: the same configuration, a new certificate behind current/.
    const second = await config();
    expect(second).toBe(first);
    process.kill(server.pid, "SIGHUP");
    const renewed = await waitFor("the server presenting the new certificate", async () => {
      const s = await servedSerial(port);
      return s !== firstSerial ? s : undefined;
    });
    expect(said[1]).toContain(`server certificate ${renewed.toLowerCase()}`);
    expect(nc.isClosed()).toBe(false);
    await nc.flush();
  });
});
