/**
 * The issuer over HTTPS with a certificate of the mesh's authority, laid out as an agent writes a
 * `tls.certificate` binding (a symlink to one generation's directory, swapped at each renewal):
 * it serves the certificate, serves the next generation's once the symlink moves, with no
 * restart; and it refuses to listen beyond loopback without one.
 */
import { X509Certificate, randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, renameSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { get } from "node:https";
import type { TLSSocket } from "node:tls";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { newAuthority, newPrivateKeyPem, openAuthority, issueCertificate, sealCaKey } from "@mesh/providers";
import { parseMasterKey } from "@mesh/shared";
import { createLogger } from "@mesh/shared/service";
import { TLS_RELOAD_MS, startTokenIssuer } from "./issuer.js";

const dir = mkdtempSync(join(tmpdir(), "mesh-oci-tls-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const options = {
  admin: { username: "mesh-admin", password: "admin-secret" },
  service: "mesh-registry",
  issuer: "mesh-oci-token-issuer",
  log: createLogger("oci-token-issuer", { level: "silent" }),
};

/** The serial of the certificate the issuer at `url` presents, trusting `ca` alone. */
function servedSerial(url: string, ca: string): Promise<string> {
  return new Promise((resolve, reject) => {
    get(`${url}/token`, { ca, servername: "issuer.registry.mesh", agent: false }, (res) => {
      resolve((res.socket as TLSSocket).getPeerCertificate().serialNumber);
      res.resume();
    }).on("error", reject);
  });
}

describe("the token issuer over TLS", () => {
  it("serves the binding's certificate, and the next generation's once the binding moves to it", async () => {
    const mk = parseMasterKey(randomBytes(32).toString("hex"));
    const made = await newAuthority();
    const ca = await openAuthority(mk, made.certificatePem, sealCaKey(mk, made.keyPem));
    const generation = async (name: string) => {
      const key = newPrivateKeyPem();
      const cert = await issueCertificate(ca, {
        keyPem: key,
        dnsNames: ["issuer.registry.mesh"],
        ipAddresses: ["127.0.0.1"],
        lifetimeMs: 3600_000,
        usage: "server",
      });
      mkdirSync(join(dir, name));
      writeFileSync(join(dir, name, "tls.crt"), cert);
      writeFileSync(join(dir, name, "tls.key"), key, { mode: 0o600 });
      return new X509Certificate(cert).serialNumber;
    };
    const first = await generation("tls-g1");
    symlinkSync(join(dir, "tls-g1"), join(dir, "tls"));
    const issuer = await startTokenIssuer({ ...options, stateDir: join(dir, "state"), tlsDir: join(dir, "tls"), host: "127.0.0.1", port: 0 });
    try {
      expect(issuer.url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
      expect(await servedSerial(issuer.url, ca.bundlePem)).toBe(first);
      // A renewal: the next generation beside it, the symlink renamed over.
      const second = await generation("tls-g2");
      symlinkSync(join(dir, "tls-g2"), join(dir, "tls.next"));
      renameSync(join(dir, "tls.next"), join(dir, "tls"));
      const deadline = Date.now() + TLS_RELOAD_MS * 3;
      let served = first;
      while (served !== second && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 200));
        served = await servedSerial(issuer.url, ca.bundlePem);
      }
      expect(served).toBe(second);
    } finally {
      await issuer.close();
    }
  });

  it("refuses to listen beyond loopback without a certificate, saying what to set", async () => {
    await expect(startTokenIssuer({ ...options, stateDir: join(dir, "state-open"), host: "0.0.0.0", port: 0 })).rejects.toThrow(
      /0\.0\.0\.0 is not a loopback address, and beyond loopback the issuer serves only HTTPS .*MESH_OCI_ISSUER_TLS_DIR/,
    );
    await expect(startTokenIssuer({ ...options, stateDir: join(dir, "state-missing"), tlsDir: join(dir, "none"), port: 0 })).rejects.toThrow(
      /cannot read the certificate in .*none \(tls\.crt and tls\.key\)/,
    );
  });
});
