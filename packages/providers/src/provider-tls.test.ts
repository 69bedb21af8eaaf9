import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorCodes } from "@mesh/shared";
import { meshCaBundleFile, resolveProviderTls, tlsFailure, verifyingFetch } from "./provider-tls.js";
import { certificatesOf, fingerprintOf, newAuthority } from "./mesh-ca.js";
import { createAdapter } from "./registry.js";
import type { ServerTls } from "./adapter.js";

let PEM: string;
let FP: string;
beforeAll(async () => {
  PEM = (await newAuthority()).certificatePem;
  FP = fingerprintOf(certificatesOf(PEM)[0]!);
});

describe("resolveProviderTls", () => {
  const state = mkdtempSync(join(tmpdir(), "mesh-state-"));
  afterAll(() => rmSync(state, { recursive: true, force: true }));

  it("is none without tls, the document's bundle with ca", () => {
    expect(resolveProviderTls({ name: "pg" }, {})).toBeUndefined();
    expect(resolveProviderTls({ name: "pg", tls: { ca: PEM, serverName: "db.shop.mesh" } }, {})).toEqual({ ca: PEM, trusts: FP, serverName: "db.shop.mesh" });
  });

  it("reads the mesh's bundle from the state directory at each call, and says what to do where there is none", async () => {
    const env = { MESH_STATE_DIR: state };
    expect(() => resolveProviderTls({ name: "pg", tls: { mesh: true } }, env)).toThrow(
      expect.objectContaining({
        code: ErrorCodes.ProviderMisconfigured,
        message: expect.stringContaining(
          `provider pg: tls.mesh verifies the server against the mesh's certificate authority, whose bundle ${join(state, "mesh-ca", "ca.crt")} this service cannot read (ENOENT)`,
        ),
      }),
    );
    mkdirSync(join(state, "mesh-ca"));
    writeFileSync(meshCaBundleFile(env), PEM);
    expect(resolveProviderTls({ name: "pg", tls: { mesh: true } }, env)).toEqual({ ca: PEM, trusts: FP });
    const next = (await newAuthority()).certificatePem;
    writeFileSync(meshCaBundleFile(env), PEM + next);
    expect(resolveProviderTls({ name: "pg", tls: { mesh: true } }, env)).toEqual({
      ca: PEM + next,
      trusts: `${FP},${fingerprintOf(certificatesOf(next)[0]!)}`,
    });
  });

  it("refuses a bundle it cannot read, naming where it came from", () => {
    expect(() => resolveProviderTls({ name: "pg", tls: { ca: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n" } }, {})).toThrow(
      expect.objectContaining({
        code: ErrorCodes.ProviderMisconfigured,
        message: expect.stringMatching(/^provider pg: tls.ca holds a certificate that cannot be read/),
      }),
    );
  });
});

describe("tlsFailure", () => {
  it("names each way a handshake fails, and nothing else", () => {
    const coded = (code: string, message = code) => Object.assign(new Error(message), { code });
    expect(tlsFailure(Object.assign(coded("ERR_TLS_CERT_ALTNAME_INVALID"), { reason: "IP: 127.0.0.1 is not in the cert's list: " }))).toMatch(
      /^its certificate is not for the name checked \(IP: 127.0.0.1 is not in the cert's list: \): .*tls.serverName/,
    );
    expect(tlsFailure(coded("CERT_HAS_EXPIRED"))).toMatch(/^its certificate has expired/);
    expect(tlsFailure(coded("SELF_SIGNED_CERT_IN_CHAIN"))).toMatch(/^its certificate is not signed by an authority of the provider's tls bundle/);
    expect(tlsFailure(new Error("The server does not support SSL connections"))).toMatch(/^it does not speak TLS/);
    expect(
      tlsFailure(
        coded(
          "ERR_SSL_WRONG_VERSION_NUMBER",
          "80DC4B919F7F0000:error:0A00010B:SSL routines:ssl3_get_record:wrong version number:../deps/openssl/openssl/ssl/record/ssl3_record.c:350:\n",
        ),
      ),
    ).toBe("it does not speak TLS (wrong version number): turn TLS on at the server, or leave tls out of the provider (nothing falls back to plain text)");
    // mysql2 passes OpenSSL's message on under a code of its own.
    expect(tlsFailure(coded("HANDSHAKE_SSL_ERROR", "self-signed certificate"))).toMatch(/^its certificate is not signed by an authority/);
    expect(tlsFailure(coded("HANDSHAKE_SSL_ERROR", "Hostname/IP does not match certificate's altnames: IP: 127.0.0.1"))).toMatch(
      /^its certificate is not for the name checked \(Hostname/,
    );
    // fetch rejects with "fetch failed", the handshake's error as its cause.
    expect(tlsFailure(new TypeError("fetch failed", { cause: coded("CERT_HAS_EXPIRED") }))).toMatch(/^its certificate has expired/);
    expect(tlsFailure(new TypeError("fetch failed", { cause: coded("ECONNREFUSED") }))).toBeUndefined();
    expect(tlsFailure(coded("ECONNREFUSED"))).toBeUndefined();
    expect(tlsFailure(coded("ETIMEDOUT"))).toBeUndefined();
    expect(tlsFailure(coded("ETIMEDOUT"), true)).toMatch(/^it answered no TLS handshake in time/);
    expect(tlsFailure(coded("28P01", "password authentication failed"))).toBeUndefined();
  });
});

describe("a registry provider's tls", () => {
  /** What making the adapter of `kind` for `endpoint` with `tls` throws, or "made". */
  const made = (kind: string, endpoint: string, tls: ServerTls, options: Record<string, string> = {}) => {
    try {
      createAdapter(kind, { name: "reg", node: "node-a", endpoint, tls, options });
      return "made";
    } catch (e) {
      expect(e).toMatchObject({ code: ErrorCodes.ProviderMisconfigured });
      return (e as Error).message;
    }
  };
  const tls = () => ({ ca: PEM });
  const npmOptions = { usersDir: "/var/lib/mesh/verdaccio-users" };

  it("is made over https://, its issuer's URL too", () => {
    expect(made("oci.registry", "https://127.0.0.1:5000", tls(), { issuerUrl: "https://127.0.0.1:5001" })).toBe("made");
    expect(made("npm.registry", "https://127.0.0.1:4873/", tls(), npmOptions)).toBe("made");
  });

  it("refuses a URL in plain text, where passwords would go in the clear", () => {
    expect(made("oci.registry", "http://127.0.0.1:5000", tls(), { issuerUrl: "https://127.0.0.1:5001" })).toMatch(
      /says tls, but its endpoint http:\/\/127.0.0.1:5000 is not https:\/\//,
    );
    expect(made("oci.registry", "https://127.0.0.1:5000", tls(), { issuerUrl: "http://127.0.0.1:5001" })).toMatch(
      /says tls, but its options.issuerUrl http:\/\/127.0.0.1:5001 is not https:\/\//,
    );
    expect(made("npm.registry", "http://127.0.0.1:4873", tls(), npmOptions)).toMatch(/says tls, but its endpoint http:\/\/127.0.0.1:4873 is not https:\/\//);
  });

  it("refuses tls.serverName, which docker and npm cannot honour", () => {
    const named = { ca: PEM, serverName: "registry.shop.mesh" };
    expect(made("oci.registry", "https://127.0.0.1:5000", named, { issuerUrl: "https://127.0.0.1:5001" })).toMatch(/docker checks .*leave tls.serverName out/);
    expect(made("npm.registry", "https://127.0.0.1:4873", named, npmOptions)).toMatch(/npm checks .*leave tls.serverName out/);
  });

  it("refuses tls on a registry served from NATS, and on a kind with no server to verify", () => {
    expect(made("oci.registry", "nats://127.0.0.1:4222", tls())).toMatch(/serves oci.registry from NATS, .*tls:\/\/host:port, give options.caFile/);
    expect(made("secret", "mesh://secrets", tls())).toMatch(/the mesh reaches no server of secret that it could verify/);
  });
});

describe("verifyingFetch", () => {
  it("never asks a server to verify in plain text", async () => {
    await expect(verifyingFetch("http://127.0.0.1:9/", {}, { ca: PEM })).rejects.toMatchObject({
      code: ErrorCodes.ProviderMisconfigured,
      message: expect.stringContaining("http://127.0.0.1:9/ is not https://"),
    });
  });
});
