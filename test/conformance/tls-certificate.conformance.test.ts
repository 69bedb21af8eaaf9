/**
 * The tls.certificate adapter of the mesh's certificate authority (provider mesh-ca), with an
 * authority of the test's own in a temporary directory: the adapter contract, the servicebinding
 * TLS layout, and what OpenSSL makes of what it issues.
 */
import { execFileSync } from "node:child_process";
import { X509Certificate } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorCodes, Kinds, MESH_CA_PROVIDER, parseMasterKey } from "@mesh/shared";
import { caFiles, createAdapter, ensureMeshCa, newPrivateKeyPem, type CaFiles, type CreateResult, type ProviderConfig } from "@mesh/providers";
import { describeProviderConformance, expectMeshError, freshGrant } from "./provider-conformance.js";

const masterKey = parseMasterKey(Buffer.alloc(32, 3).toString("base64"));
const dir = mkdtempSync(join(tmpdir(), "mesh-ca-conformance-"));
const files: CaFiles = caFiles(join(dir, "ca"));
const provider = (options: ProviderConfig["options"] = {}): ProviderConfig => ({
  name: MESH_CA_PROVIDER,
  node: "node-a",
  endpoint: "builtin://mesh-ca",
  masterKey,
  options: { caCertFile: files.certFile, caKeyFile: files.keyFile, ...options },
});

beforeAll(async () => {
  await ensureMeshCa(files, masterKey);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A create's result without what a certificate's issuance makes anew each time: the serial, the signature, the instant. */
const sameOnRepeat = (r: CreateResult) => {
  const { "tls.crt": crt, ...bindings } = r.bindings;
  const x = new X509Certificate(crt!);
  const { serial: _serial, ...resource } = r.resource;
  return { resource, bindings, names: x.subjectAltName, key: x.publicKey.export({ type: "spki", format: "pem" }) };
};

describeProviderConformance(Kinds.TlsCertificate, () => createAdapter(Kinds.TlsCertificate, provider()), {
  stateful: false,
  sameOnRepeat,
  wrongCredential: (b) => ({ ...b, "tls.key": newPrivateKeyPem() }),
});

describe("tls.certificate at mesh-ca", () => {
  it("binds tls.crt, tls.key and ca.crt that OpenSSL verifies, for the parts' default names, expiring when the certificate does", async () => {
    const adapter = createAdapter(Kinds.TlsCertificate, provider());
    const grant = freshGrant();
    const secret = adapter.generate();
    const r = await adapter.create({ grant, secret, parts: ["web"] });
    expect(Object.keys(r.bindings).sort()).toEqual(["ca.crt", "provider", "tls.crt", "tls.key", "type"]);
    expect(r.bindings.type).toBe("tls");
    expect(r.bindings["tls.key"]).toBe(secret.key);
    expect(r.bindings["ca.crt"]).toBe(readFileSync(files.certFile, "utf8"));
    const work = mkdtempSync(join(dir, "b-"));
    for (const k of ["tls.crt", "ca.crt"]) writeFileSync(join(work, k), r.bindings[k]!);
    expect(execFileSync("openssl", ["verify", "-CAfile", join(work, "ca.crt"), join(work, "tls.crt")], { encoding: "utf8" })).toMatch(/tls\.crt: OK/);
    const x = new X509Certificate(r.bindings["tls.crt"]!);
    expect(x.subjectAltName).toBe(`DNS:web.${grant.module}.mesh`);
    expect(r.expiresAt).toBe(new Date(x.validTo).toISOString());
    expect(new Date(r.expiresAt!).getTime() - Date.now()).toBeGreaterThan(23 * 3600_000);
    expect(r.resource).toMatchObject({ serial: x.serialNumber, names: `web.${grant.module}.mesh`, usage: "server" });
  });

  it("refuses what is outside its ceiling before issuing anything, and an authority it cannot open", async () => {
    const adapter = createAdapter(Kinds.TlsCertificate, provider({ maxLifetime: "1h" }));
    const grant = freshGrant();
    expect(
      (await expectMeshError(adapter.create({ grant, secret: adapter.generate(), options: { lifetime: "2h" } }), ErrorCodes.InvalidRequest)).message,
    ).toMatch(/longer than provider mesh-ca allows \(1h\)/);
    expect(
      (await expectMeshError(adapter.create({ grant, secret: adapter.generate(), options: { dnsNames: "example.com" } }), ErrorCodes.InvalidRequest)).message,
    ).toMatch(/outside/);
    const keyless = createAdapter(Kinds.TlsCertificate, { ...provider(), masterKey: undefined });
    expect((await expectMeshError(keyless.create({ grant, secret: keyless.generate() }), ErrorCodes.ProviderMisconfigured)).message).toMatch(
      /holds no master key/,
    );
    const wrongKey = createAdapter(Kinds.TlsCertificate, { ...provider(), masterKey: parseMasterKey(Buffer.alloc(32, 4).toString("base64")) });
    expect((await expectMeshError(wrongKey.create({ grant, secret: wrongKey.generate() }), ErrorCodes.ProviderMisconfigured)).message).toMatch(
      /cannot open the certificate authority/,
    );
  });

  it("does not let a binding vouch for itself: a certificate of another authority with that authority as its ca.crt is rejected", async () => {
    const other = caFiles(join(dir, "other"));
    await ensureMeshCa(other, masterKey);
    const foreign = createAdapter(Kinds.TlsCertificate, { ...provider(), name: "other-ca", options: { caCertFile: other.certFile, caKeyFile: other.keyFile } });
    const grant = freshGrant();
    const r = await foreign.create({ grant, secret: foreign.generate(), parts: ["web"] });
    expect(await foreign.login({ bindings: r.bindings })).toEqual({ ok: true });
    const ours = createAdapter(Kinds.TlsCertificate, provider());
    expect(await ours.login({ bindings: r.bindings })).toMatchObject({
      ok: false,
      reason: "rejected",
      message: expect.stringMatching(/is not signed by an authority of provider mesh-ca/),
    });
  });
});
