/**
 * Certificates for a test's own servers that speak TLS: a fresh authority, as the mesh's CA
 * makes one, and server certificates it issues, for the harnesses that present them.
 */
import { randomBytes } from "node:crypto";
import { chownSync, renameSync, writeFileSync } from "node:fs";
import { connect as tcpConnect, type Socket } from "node:net";
import { connect as tlsConnect } from "node:tls";
import { parseMasterKey } from "@mesh/shared";
import { issueCertificate, newAuthority, newPrivateKeyPem, openAuthority, sealCaKey, type Authority } from "@mesh/providers";

/** A server certificate (its chain, PEM) and its private key (PKCS #8 PEM). */
export interface ServerCertificate {
  certPem: string;
  keyPem: string;
}

/** A fresh authority; its `bundlePem` is what a provider's `tls.ca` takes. */
export async function testAuthority(): Promise<Authority> {
  const mk = parseMasterKey(randomBytes(32).toString("hex"));
  const ca = await newAuthority();
  return openAuthority(mk, ca.certificatePem, sealCaKey(mk, ca.keyPem));
}

/** A server certificate of `ca` for `names`, valid for an hour. */
export async function serverCertificate(ca: Authority, names: { dnsNames?: string[]; ipAddresses?: string[] }): Promise<ServerCertificate> {
  const keyPem = newPrivateKeyPem();
  const certPem = await issueCertificate(ca, {
    keyPem,
    dnsNames: names.dnsNames ?? [],
    ipAddresses: names.ipAddresses ?? [],
    lifetimeMs: 3_600_000,
    usage: "server",
  });
  return { certPem, keyPem };
}

/** What a server on 127.0.0.1 presents to be verified: a certificate for that address and `localhost`. */
export const LOOPBACK_NAMES = { dnsNames: ["localhost"], ipAddresses: ["127.0.0.1"] };

/**
 * Writes `cert` over the server's files (0600, owned by `owner` when given), each whole by a
 * rename, so a server that reloads them never reads half of one.
 */
export function writeServerCertificate(cert: ServerCertificate, files: { certFile: string; keyFile: string }, owner?: { uid: number; gid: number }): void {
  for (const [file, text] of [
    [files.certFile, cert.certPem],
    [files.keyFile, cert.keyPem],
  ] as const) {
    writeFileSync(`${file}.new`, text, { mode: 0o600 });
    if (owner) chownSync(`${file}.new`, owner.uid, owner.gid);
    renameSync(`${file}.new`, file);
  }
}

/**
 * The serial of the certificate the server at `url` presents, verifying nothing (uppercase hex,
 * as X509Certificate says it): at once for `https://`; for NATS (`tls://`, `nats://`), after the
 * INFO line it sends in plain text before the handshake.
 */
export async function presentedSerial(url: string): Promise<string> {
  const { protocol, hostname, port } = new URL(url);
  let socket: Socket | undefined;
  if (protocol !== "https:") {
    const plain = tcpConnect({ host: hostname, port: Number(port) });
    await new Promise<void>((resolve, reject) => {
      let seen = "";
      plain.on("data", (d: Buffer) => {
        seen += d.toString();
        if (seen.includes("\r\n")) {
          plain.removeAllListeners("data");
          plain.pause();
          resolve();
        }
      });
      plain.once("error", reject);
    });
    socket = plain;
  }
  return new Promise((resolve, reject) => {
    const tls = tlsConnect({ host: hostname, port: Number(port), rejectUnauthorized: false, ...(socket ? { socket } : {}) }, () => {
      resolve(tls.getPeerX509Certificate()?.serialNumber ?? "");
      tls.destroy();
    });
    tls.once("error", reject);
  });
}
