/**
 * A `nats.user` provider at a NATS server of the test's own whose operator is the mesh and which
 * requires TLS of every client, its certificate issued by a fresh authority: the provider names
 * it `tls://` with the bundle as `options.caFile` (a NATS provider's way of saying `tls:`).
 * Provisioning, the verifier's login, rotation, retirement and take-back all go over verified
 * TLS; a holder connects with its binding alone; a server presenting a certificate for another
 * name, or of another authority, or not speaking TLS, is `ProviderUnreachable` naming why.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect } from "@nats-io/transport-node";
import { ErrorCodes } from "@mesh/shared";
import { createAdapter, type Authority, type BindingValues, type ProviderAdapter } from "@mesh/providers";
import { natsUserConnectOptions } from "../packages/client/src/nats-user-binding.js";
import { startOperatorNats, type OperatorNats } from "./harness/nats-operator.js";
import { plainClient } from "./harness/plain-nats-client.js";
import { LOOPBACK_NAMES, serverCertificate, testAuthority, type ServerCertificate } from "./harness/server-certificate.js";

const dir = mkdtempSync(join(tmpdir(), "mesh-nats-user-tls-"));
let ca: Authority;
let good: ServerCertificate;
let nats: OperatorNats;
const opened: ProviderAdapter[] = [];

/** The bundle `pem` as a file, as `options.caFile` names one. */
function bundleFile(name: string, pem: string): string {
  const file = join(dir, `${name}.crt`);
  writeFileSync(file, pem);
  return file;
}

/** The provider's adapter at `server`, trusting `caPem`: endpoint `tls://`, the bundle in `options.caFile`. */
function adapterAt(server: OperatorNats, caPem: string, name = "trusted"): ProviderAdapter {
  const provider = server.provider();
  const adapter = createAdapter(
    "nats.user",
    server.provider({
      endpoint: server.url.replace(/^nats:/, "tls:"),
      options: { ...provider.options, caFile: bundleFile(name, caPem) },
    }),
  );
  opened.push(adapter);
  return adapter;
}

/** Connects as a holder does, from a directory holding the binding's values alone (the SDK's options), and makes a round trip. */
async function holderSession(b: BindingValues): Promise<void> {
  const binding = mkdtempSync(join(dir, "binding-"));
  for (const [k, v] of Object.entries(b)) writeFileSync(join(binding, k), v);
  const nc = await connect({ ...natsUserConnectOptions(binding), reconnect: false, timeout: 5_000 });
  try {
    await nc.flush();
  } finally {
    await nc.close();
  }
}

beforeAll(async () => {
  ca = await testAuthority();
  good = await serverCertificate(ca, LOOPBACK_NAMES);
  nats = await startOperatorNats({ tls: good });
});
afterAll(async () => {
  await Promise.all(opened.map((a) => a.close()));
  await nats?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe("a nats.user provider over verified TLS", () => {
  it("refuses a client without TLS, so what passes below went over TLS", async () => {
    const { said, info } = await plainClient({ host: "127.0.0.1", port: nats.server.port });
    expect(info?.tls_required).toBe(true);
    expect(said).not.toContain("PONG");
  });

  it("provisions, verifies, rotates, retires and takes back over verified TLS; the holder connects with its binding alone", async () => {
    const adapter = adapterAt(nats, ca.bundlePem);
    const ref = (generation: number) => ({ module: "shop", requirement: "bus", generation });
    const g1 = (await adapter.create({ grant: ref(1), secret: adapter.generate() })).bindings;
    expect(g1.uri).toMatch(/^tls:\/\//);
    expect(g1["ca.crt"]).toBe(ca.bundlePem);
    expect(await adapter.login({ bindings: g1 })).toEqual({ ok: true });
    await holderSession(g1);

    const g2 = (await adapter.create({ grant: ref(2), secret: adapter.generate() })).bindings;
    expect(await adapter.login({ bindings: g2 })).toEqual({ ok: true });
    await adapter.retire({ grant: ref(1) });
    expect(await adapter.login({ bindings: g1 })).toMatchObject({ ok: false, reason: "rejected" });
    await holderSession(g2);

    await adapter.delete({ grant: ref(2) });
    expect((await adapter.observe({ grant: ref(2) })).exists).toBe(false);
    expect(await adapter.login({ bindings: g2 })).toMatchObject({ ok: false, reason: "rejected" });
  });

  it("a server presenting a certificate for another name is ProviderUnreachable, saying so, until it presents its own", async () => {
    const before = adapterAt(nats, ca.bundlePem, "before");
    const ref = { module: "named", requirement: "bus", generation: 1 };
    const b = (await before.create({ grant: ref, secret: before.generate() })).bindings;
    await nats.presentCertificate(await serverCertificate(ca, { dnsNames: ["bus.elsewhere.test"] }));
    try {
      // A new adapter: the first one's open connection keeps the handshake it made.
      const adapter = adapterAt(nats, ca.bundlePem, "renamed");
      await expect(adapter.observe({ grant: ref })).rejects.toMatchObject({
        code: ErrorCodes.ProviderUnreachable,
        message: expect.stringMatching(/cannot be reached over verified TLS, so could not .*: its certificate is not for the name checked/),
      });
      expect(await adapter.login({ bindings: b })).toMatchObject({
        ok: false,
        reason: "unreachable",
        message: expect.stringMatching(/over verified TLS: its certificate is not for the name checked/),
      });
    } finally {
      await nats.presentCertificate(good);
    }
    expect(await adapterAt(nats, ca.bundlePem, "after").login({ bindings: b })).toEqual({ ok: true });
  });

  it("a provider whose bundle does not hold the server's authority makes nothing, and a login with it is refused before its password goes", async () => {
    const other = await testAuthority();
    const adapter = adapterAt(nats, other.bundlePem, "other");
    const ref = { module: "stranger", requirement: "bus", generation: 1 };
    await expect(adapter.create({ grant: ref, secret: adapter.generate() })).rejects.toMatchObject({
      code: ErrorCodes.ProviderUnreachable,
      message: expect.stringMatching(
        /cannot be reached over verified TLS, so could not .*: its certificate is not signed by an authority of the provider's tls bundle/,
      ),
    });
    expect((await adapterAt(nats, ca.bundlePem, "check").observe({ grant: ref })).exists).toBe(false);
    const trusted = adapterAt(nats, ca.bundlePem, "trusted-again");
    const b = (await trusted.create({ grant: { module: "stranger2", requirement: "bus", generation: 1 }, secret: trusted.generate() })).bindings;
    expect(await adapter.login({ bindings: { ...b, "ca.crt": other.bundlePem } })).toMatchObject({
      ok: false,
      reason: "unreachable",
      message: expect.stringContaining("not signed by an authority"),
    });
  });

  it("a provider that says tls://, at a server that does not speak it, is refused before any password is sent", async () => {
    const plain = await startOperatorNats();
    try {
      const adapter = adapterAt(plain, ca.bundlePem, "plain");
      await expect(adapter.observe({ grant: { module: "cleartext", requirement: "bus", generation: 1 } })).rejects.toMatchObject({
        code: ErrorCodes.ProviderUnreachable,
        message: expect.stringMatching(/cannot be reached over verified TLS, so could not .*: it does not speak TLS/),
      });
    } finally {
      await plain.stop();
    }
  });
});
