import { execFileSync } from "node:child_process";
import { X509Certificate } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { parseMasterKey } from "@mesh/shared";
import {
  beginCaRotation,
  caRotationStep,
  certificatesOf,
  dropRetiredAuthorities,
  fingerprintOf,
  switchCaIssuer,
  caFiles,
  checkCertificate,
  ensureMeshCa,
  issueCertificate,
  newAuthority,
  newPrivateKeyPem,
  openAuthority,
  readAuthority,
  sealCaKey,
} from "./mesh-ca.js";

const mk = parseMasterKey(Buffer.alloc(32, 7).toString("base64"));
const dir = mkdtempSync(join(tmpdir(), "mesh-ca-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("the mesh's certificate authority", () => {
  it("is made once, its key sealed (0600) and never in the clear, and opened again as it was", async () => {
    const files = caFiles(join(dir, "ca"));
    expect(await ensureMeshCa(files, mk)).toEqual({ created: true });
    const cert = readFileSync(files.certFile, "utf8");
    expect(await ensureMeshCa(files, mk)).toEqual({ created: false });
    expect(readFileSync(files.certFile, "utf8")).toBe(cert);
    expect(statSync(files.keyFile).mode & 0o777).toBe(0o600);
    expect(statSync(files.dir).mode & 0o777).toBe(0o700);
    expect(readFileSync(files.keyFile, "utf8")).not.toMatch(/PRIVATE KEY/);
    const x = new X509Certificate(cert);
    expect(x.ca).toBe(true);
    expect(x.publicKey.asymmetricKeyDetails?.namedCurve).toBe("prime256v1");
    const ca = await readAuthority(files, mk);
    expect(ca.bundlePem.trim()).toBe(cert.trim());
    const other = parseMasterKey(Buffer.alloc(32, 8).toString("base64"));
    await expect(readAuthority(files, other)).rejects.toThrow();
  });

  it("refuses to make a new authority beside half of an old one", async () => {
    const files = caFiles(join(dir, "half"));
    await ensureMeshCa(files, mk);
    rmSync(files.keyFile);
    await expect(ensureMeshCa(files, mk)).rejects.toThrow(/incomplete: .*ca-key\.json is missing; restore it/);
  });

  it("issues a certificate that OpenSSL verifies against the bundle, with the names, key and usage asked", async () => {
    const { certificatePem, keyPem } = await newAuthority();
    const ca = await openAuthority(mk, certificatePem, sealCaKey(mk, keyPem));
    const key = newPrivateKeyPem();
    const pem = await issueCertificate(ca, { keyPem: key, dnsNames: ["web.shop.mesh"], ipAddresses: ["127.0.0.1"], lifetimeMs: 3600_000, usage: "server" });
    writeFileSync(join(dir, "ca.crt"), certificatePem);
    writeFileSync(join(dir, "tls.crt"), pem);
    expect(execFileSync("openssl", ["verify", "-purpose", "sslserver", "-CAfile", join(dir, "ca.crt"), join(dir, "tls.crt")], { encoding: "utf8" })).toMatch(
      /OK/,
    );
    expect(() =>
      execFileSync("openssl", ["verify", "-purpose", "sslclient", "-CAfile", join(dir, "ca.crt"), join(dir, "tls.crt")], { stdio: "pipe" }),
    ).toThrow();
    const x = new X509Certificate(pem);
    expect(x.subjectAltName).toBe("DNS:web.shop.mesh, IP Address:127.0.0.1");
    expect(x.checkHost("web.shop.mesh")).toBe("web.shop.mesh");
    expect(new Date(x.validTo).getTime() - Date.now()).toBeGreaterThan(3500_000);
    const check = checkCertificate({ certPem: pem, keyPem: key, caPem: certificatePem });
    expect(check).toMatchObject({ ok: true, serial: x.serialNumber, dnsNames: ["web.shop.mesh"], ipAddresses: ["127.0.0.1"] });
  });

  it("tells an untrusted, a mismatched, an expired and a malformed certificate apart", async () => {
    const a = await newAuthority();
    const b = await newAuthority();
    const caA = await openAuthority(mk, a.certificatePem, sealCaKey(mk, a.keyPem));
    const key = newPrivateKeyPem();
    const spec = { keyPem: key, dnsNames: ["web.shop.mesh"], ipAddresses: [], lifetimeMs: 60_000, usage: "both" as const };
    const pem = await issueCertificate(caA, spec);
    expect(checkCertificate({ certPem: pem, keyPem: key, caPem: b.certificatePem })).toMatchObject({ ok: false, problem: "untrusted" });
    expect(checkCertificate({ certPem: pem, keyPem: key, caPem: `${b.certificatePem}${a.certificatePem}` })).toMatchObject({ ok: true });
    expect(checkCertificate({ certPem: pem, keyPem: newPrivateKeyPem(), caPem: a.certificatePem })).toMatchObject({ ok: false, problem: "key-mismatch" });
    expect(checkCertificate({ certPem: pem, keyPem: key, caPem: a.certificatePem }, new Date(Date.now() + 120_000))).toMatchObject({
      ok: false,
      problem: "expired",
    });
    expect(checkCertificate({ certPem: "nothing", keyPem: key, caPem: a.certificatePem })).toMatchObject({ ok: false, problem: "malformed" });
  });

  it("rotates in three steps the files alone record: both trusted, then the new one issuing, then the new one alone", async () => {
    const files = caFiles(join(dir, "rotated"));
    await ensureMeshCa(files, mk);
    const old = await readAuthority(files, mk);
    const oldFp = fingerprintOf(certificatesOf(old.bundlePem)[0]!);
    expect(await caRotationStep(files, mk)).toBe("none");

    const nextFp = await beginCaRotation(files, mk);
    expect(await beginCaRotation(files, mk)).toBe(nextFp); // resumed, not made again
    expect(await caRotationStep(files, mk)).toBe("introduced");
    const both = await readAuthority(files, mk);
    expect(certificatesOf(both.bundlePem).map(fingerprintOf)).toEqual([oldFp, nextFp]);
    expect(fingerprintOf(certificatesOf(both.certificate.toString("pem"))[0]!)).toBe(oldFp);

    await switchCaIssuer(files, mk);
    await switchCaIssuer(files, mk);
    expect(await caRotationStep(files, mk)).toBe("switched");
    const switched = await readAuthority(files, mk);
    expect(fingerprintOf(certificatesOf(switched.certificate.toString("pem"))[0]!)).toBe(nextFp);
    expect(certificatesOf(switched.bundlePem)).toHaveLength(2);
    // Issued under the new one, trusted by a holder that has only the bundle of step 1.
    const key = newPrivateKeyPem();
    const pem = await issueCertificate(switched, { keyPem: key, dnsNames: ["web.shop.mesh"], ipAddresses: [], lifetimeMs: 60_000, usage: "server" });
    expect(checkCertificate({ certPem: pem, keyPem: key, caPem: both.bundlePem })).toMatchObject({ ok: true });
    expect(checkCertificate({ certPem: pem, keyPem: key, caPem: old.bundlePem })).toMatchObject({ ok: false, problem: "untrusted" });

    await dropRetiredAuthorities(files, mk);
    expect(await caRotationStep(files, mk)).toBe("none");
    // Cut short between its two writes (the next key there, its certificate not yet in the bundle): resumed, not mistaken for step 2.
    const before = readFileSync(files.certFile, "utf8");
    await beginCaRotation(files, mk);
    writeFileSync(files.certFile, before);
    expect(await caRotationStep(files, mk)).toBe("introduced");
    const again = await beginCaRotation(files, mk); // a certificate made again for the key that is there
    expect(certificatesOf(readFileSync(files.certFile, "utf8")).map(fingerprintOf)).toEqual([nextFp, again]);
    await switchCaIssuer(files, mk);
    expect(fingerprintOf(certificatesOf((await readAuthority(files, mk)).certificate.toString("pem"))[0]!)).toBe(again);
    await dropRetiredAuthorities(files, mk);
    expect(certificatesOf(readFileSync(files.certFile, "utf8")).map(fingerprintOf)).toEqual([again]);
    expect(statSync(files.certFile).mode & 0o777).toBe(0o600);
  });
});
