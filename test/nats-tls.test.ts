/**
 * The mesh's processes on a NATS server that requires TLS, with a server certificate of the
 * mesh's authority, on a nats-server of the test's own (a server the mesh does not start, as an
 * operator runs one): a client that does not speak TLS gets the server's INFO saying
 * `tls_required` and nothing more; a process given the authority's bundle (MESH_NATS_CA_FILE, or
 * the ca.crt of its binding) connects, verifies the server and uses JetStream; one without it, or
 * with another authority's, is refused with a message that says what to set.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorCodes, isMeshError, parseMasterKey } from "@mesh/shared";
import { connectNats, natsTls, openStore } from "@mesh/shared/runtime";
import { caFiles, ensureMeshCa, issueCertificate, newPrivateKeyPem, readAuthority } from "@mesh/providers";
import { natsUserConnectOptions } from "../packages/client/src/nats-user-binding.js";
import { plainClient } from "./harness/plain-nats-client.js";
import { startNatsServer, type NatsServer } from "./harness/nats-server.js";

const dir = mkdtempSync(join(tmpdir(), "mesh-nats-tls-"));
const masterKey = parseMasterKey(Buffer.alloc(32, 9).toString("hex"));
const ca = caFiles(join(dir, "mesh-ca"));
const otherCa = caFiles(join(dir, "other-ca"));
let server: NatsServer;

/** Runs `fn` with MESH_NATS_CA_FILE set to `file` (unset for undefined), then puts it back. */
async function withCaFile<T>(file: string | undefined, fn: () => Promise<T>): Promise<T> {
  const before = process.env.MESH_NATS_CA_FILE;
  if (file === undefined) delete process.env.MESH_NATS_CA_FILE;
  else process.env.MESH_NATS_CA_FILE = file;
  try {
    return await fn();
  } finally {
    if (before === undefined) delete process.env.MESH_NATS_CA_FILE;
    else process.env.MESH_NATS_CA_FILE = before;
  }
}

beforeAll(async () => {
  await ensureMeshCa(ca, masterKey);
  await ensureMeshCa(otherCa, masterKey);
  const authority = await readAuthority(ca, masterKey);
  const key = newPrivateKeyPem();
  const cert = await issueCertificate(authority, { keyPem: key, dnsNames: ["localhost"], ipAddresses: ["127.0.0.1"], lifetimeMs: 3600_000, usage: "server" });
  const tls = join(dir, "tls");
  mkdirSync(tls);
  writeFileSync(join(tls, "tls.crt"), cert);
  writeFileSync(join(tls, "tls.key"), key, { mode: 0o600 });
  const storeDir = join(dir, "store");
  const configFile = join(dir, "server.conf");
  writeFileSync(
    configFile,
    [`tls { cert_file: "${join(tls, "tls.crt")}", key_file: "${join(tls, "tls.key")}", timeout: 2 }`, `jetstream { store_dir: "${storeDir}" }`, ""].join("\n"),
  );
  server = await startNatsServer({ configFile, storeDir });
});
afterAll(async () => {
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe("NATS with TLS", () => {
  it("refuses a client that does not speak TLS: its INFO says tls_required, and plain text gets no PONG", async () => {
    const { said, info } = await plainClient({ host: "127.0.0.1", port: server.port });
    expect(info?.tls_required).toBe(true);
    expect(said).not.toContain("PONG");
  });

  it("connects a process given the authority's bundle, verifying the server, and JetStream works", async () => {
    const nc = await withCaFile(ca.certFile, () => connectNats(server.url, { maxReconnectAttempts: 0 }));
    try {
      const store = await openStore(nc);
      await store.kv.modules.put("tls-check", "{}");
      expect((await store.kv.modules.get("tls-check"))?.string()).toBe("{}");
      expect(nc.info?.tls_required).toBe(true);
    } finally {
      await nc.close();
    }
  });

  it("refuses to trust the server without the bundle, or with another authority's, saying what to set", async () => {
    for (const [file, words] of [
      [undefined, /speaks TLS with a certificate this process does not trust .*MESH_NATS_CA_FILE/],
      [otherCa.certFile, /does not trust .*the bundle given \(.*other-ca\/ca\.crt\) does not hold it/],
    ] as const) {
      const e = await withCaFile(file, () => connectNats(server.url, { maxReconnectAttempts: 0, timeout: 3_000 })).then(
        (nc) => nc.close().then(() => undefined),
        (x: unknown) => x,
      );
      expect(isMeshError(e, ErrorCodes.ProviderUnreachable), String(e)).toBe(true);
      expect((e as Error).message).toMatch(words);
    }
    await expect(withCaFile(join(dir, "none.crt"), () => connectNats(server.url))).rejects.toThrow(/MESH_NATS_CA_FILE=.*none\.crt: cannot use it \(ENOENT\)/);
  });

  it("takes the bundle from a binding's ca.crt, for a service and for the SDK", () => {
    const binding = join(dir, "binding");
    mkdirSync(binding);
    writeFileSync(join(binding, "uri"), server.url);
    writeFileSync(join(binding, "username"), "shop_bus_1");
    writeFileSync(join(binding, "password"), "not used");
    writeFileSync(join(binding, "ca.crt"), "-----BEGIN CERTIFICATE-----\n");
    expect(natsTls({ MESH_NATS_CREDENTIALS: binding })).toEqual({ tls: { caFile: join(binding, "ca.crt") } });
    expect(natsTls({ MESH_NATS_CREDENTIALS: binding, MESH_NATS_CA_FILE: ca.certFile })).toEqual({ tls: { caFile: ca.certFile } });
    expect(natsTls({})).toEqual({});
    expect(natsUserConnectOptions(binding)).toMatchObject({ servers: [server.url], tls: { caFile: join(binding, "ca.crt") } });
  });
});
