/**
 * The mesh's certificate authority: an ECDSA P-256 key and a self-signed certificate, kept in
 * one directory (0700) as two files:
 *
 * - `ca-key.json`: the authority's private key (PKCS #8), sealed under the master key like the
 *   operator's signing keys; never written in the clear;
 * - `ca.crt`: its certificate (PEM), public, the bundle every holder of a `tls.certificate`
 *   receives as `ca.crt` (0600 all the same, as everything under meshctl's state directory).
 *
 * The authority can be rotated without a failed handshake (`meshctl ca rotate`, ca-rotation.ts
 * in the CLI), in three steps each of which the files alone record, so a rotation cut short
 * resumes where it was:
 *
 * 1. {@link beginCaRotation}: a new authority; its key sealed as `ca-next-key.json`, its
 *    certificate added to the bundle. Certificates are still issued under the old one, and every
 *    holder is given the bundle with both (a rotation of each grant);
 * 2. {@link switchCaIssuer}: the new key becomes `ca-key.json` (the old key is gone); every
 *    certificate is issued again, under the new authority, with the bundle of both;
 * 3. {@link dropRetiredAuthorities}: the bundle keeps only the issuing authority; every holder is
 *    given it, so the old root is trusted nowhere.
 *
 * Made once, then reused as they are. Certificates are issued with `@peculiar/x509` (the
 * builder: ASN.1 and extensions, signing through WebCrypto) and checked with Node's own
 * `X509Certificate` (chain, key, names, validity), so no ASN.1 is written by hand. P-256 is what
 * every client here accepts: Node's and OpenSSL's TLS, Erlang's, Go's (nats-server).
 */
import { chmodSync, existsSync, mkdirSync, readFileSync, readdirSync, readlinkSync, renameSync, rmSync, symlinkSync } from "node:fs";
import { join } from "node:path";
import { X509Certificate, createPrivateKey, createPublicKey, generateKeyPairSync, randomBytes, webcrypto } from "node:crypto";
import { isIP } from "node:net";
import * as x509 from "@peculiar/x509";
import { writePrivate } from "./nats-operator-files.js";
import { decrypt, encrypt, type CertificateUsage, type Encrypted, type MasterKey } from "@mesh/shared";

x509.cryptoProvider.set(webcrypto as unknown as Parameters<typeof x509.cryptoProvider.set>[0]);

type CryptoKey = webcrypto.CryptoKey;

const ECDSA_P256 = { name: "ECDSA", namedCurve: "P-256", hash: "SHA-256" } as const;
/** The additional data the authority's key is sealed with: a sealed file of another kind does not open as this one. */
const CA_KEY_AAD = "mesh certificate authority key";
/** How long the authority's own certificate is valid. */
export const CA_LIFETIME_MS = 5 * 365 * 24 * 3600_000;
/** How far back a certificate's `notBefore` is set, for clocks of holders that run behind. */
export const BACKDATE_MS = 5 * 60_000;

export interface CaFiles {
  dir: string;
  /** The bundle: every authority holders trust, the issuing one among them. */
  certFile: string;
  /** The issuing authority's key, sealed. */
  keyFile: string;
  /** During a rotation's first step: the next authority's key, sealed. */
  nextKeyFile: string;
}

/** The authority's files in `dir`. */
export function caFiles(dir: string): CaFiles {
  return { dir, certFile: join(dir, "ca.crt"), keyFile: join(dir, "ca-key.json"), nextKeyFile: join(dir, "ca-next-key.json") };
}

/** An authority that can issue: the bundle it is trusted in, its own certificate and its private key. */
export interface Authority {
  /** Every authority holders trust (PEM, one or two certificates): a holder's `ca.crt`. */
  bundlePem: string;
  certificate: x509.X509Certificate;
  key: CryptoKey;
}

/** A fresh P-256 private key, PKCS #8 PEM: a certificate's secret material. */
export function newPrivateKeyPem(): string {
  return generateKeyPairSync("ec", { namedCurve: "P-256" }).privateKey.export({ type: "pkcs8", format: "pem" }).toString();
}

/** A positive 128-bit serial number in hex, from the CSPRNG. */
function newSerial(): string {
  const b = randomBytes(16);
  b[0] = b[0]! & 0x7f;
  if (b[0] === 0) b[0] = 1;
  return b.toString("hex");
}

async function importPrivate(pem: string): Promise<CryptoKey> {
  const der = createPrivateKey(pem).export({ type: "pkcs8", format: "der" });
  return webcrypto.subtle.importKey("pkcs8", der, ECDSA_P256, false, ["sign"]);
}

async function importPublicOf(privatePem: string): Promise<CryptoKey> {
  const der = createPublicKey(createPrivateKey(privatePem)).export({ type: "spki", format: "der" });
  return webcrypto.subtle.importKey("spki", der, ECDSA_P256, true, ["verify"]);
}

/** What {@link ensureMeshCa} writes as `ca-key.json`. */
export function sealCaKey(mk: MasterKey, keyPem: string): string {
  return `${JSON.stringify({ mesh: CA_KEY_AAD, sealed: encrypt(mk, keyPem, CA_KEY_AAD) }, null, 2)}\n`;
}

/** Opens what {@link sealCaKey} wrote; throws an Error saying why it cannot. */
export function openCaKey(mk: MasterKey, fileText: string): string {
  let parsed: { mesh?: string; sealed?: Encrypted };
  try {
    parsed = JSON.parse(fileText) as typeof parsed;
  } catch {
    throw new Error("it is not JSON");
  }
  if (parsed?.mesh !== CA_KEY_AAD || !parsed.sealed) throw new Error("it is not a sealed key of the mesh's certificate authority");
  return decrypt(mk, parsed.sealed, CA_KEY_AAD);
}

/** A new authority's certificate and key (PEM), valid from `now` for {@link CA_LIFETIME_MS}; with `keyPem`, for that key. */
export async function newAuthority(now = new Date(), keyPem = newPrivateKeyPem()): Promise<{ certificatePem: string; keyPem: string }> {
  const keys = { privateKey: await importPrivate(keyPem), publicKey: await importPublicOf(keyPem) };
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: newSerial(),
    name: `CN=mesh certificate authority ${now.toISOString().slice(0, 10)} ${randomBytes(3).toString("hex")}, O=mesh`,
    notBefore: new Date(now.getTime() - BACKDATE_MS),
    notAfter: new Date(now.getTime() + CA_LIFETIME_MS),
    keys,
    signingAlgorithm: ECDSA_P256,
    extensions: [
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  return { certificatePem: cert.toString("pem"), keyPem };
}

/**
 * Makes the authority in `files.dir` unless it is there (the key first: a certificate without
 * its key is never left behind); says whether it made it. Throws an Error naming the file when
 * only one of the two is there.
 */
export async function ensureMeshCa(files: CaFiles, mk: MasterKey, now = new Date()): Promise<{ created: boolean }> {
  const [hasCert, hasKey] = [existsSync(files.certFile), existsSync(files.keyFile)];
  if (hasCert && hasKey) return { created: false };
  if (hasCert !== hasKey) {
    throw new Error(
      `the certificate authority in ${files.dir} is incomplete: ${hasCert ? files.keyFile : files.certFile} is missing; restore it from a backup (a new authority would not be trusted by what holds the old one's bundle)`,
    );
  }
  mkdirSync(files.dir, { recursive: true, mode: 0o700 });
  chmodSync(files.dir, 0o700);
  const ca = await newAuthority(now);
  writePrivate(files.keyFile, sealCaKey(mk, ca.keyPem));
  writePrivate(files.certFile, bundleOf([new X509Certificate(ca.certificatePem)]));
  return { created: true };
}

/** The certificates of a PEM bundle, in order. */
export function certificatesOf(pem: string): X509Certificate[] {
  const blocks = pem.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
  return blocks.map((b) => new X509Certificate(b));
}

/** A PEM bundle of `certs`, one per line block, ending in a newline. */
function bundleOf(certs: readonly X509Certificate[]): string {
  return certs.map((c) => c.toString().trim()).join("\n") + "\n";
}

/** A certificate's short fingerprint: the first 16 hex digits of its SHA-256, for records and messages. */
export function fingerprintOf(cert: X509Certificate): string {
  return cert.fingerprint256.replaceAll(":", "").slice(0, 16).toLowerCase();
}

/** How many bundles' fingerprints {@link trustsOf} remembers. */
const REMEMBERED_BUNDLES = 64;
const fingerprintsOfBundle = new Map<string, string>();

/**
 * The fingerprints of a bundle's certificates, comma-separated: what a grant's resource records
 * as the authorities its holders trust (`trusts`, read by `meshctl ca rotate`). Remembered per
 * bundle, since a provider's bundle is resolved at every check of its grants. Throws as
 * {@link certificatesOf} does for a certificate it cannot read.
 */
export function trustsOf(pem: string): string {
  let trusts = fingerprintsOfBundle.get(pem);
  if (trusts === undefined) {
    trusts = certificatesOf(pem).map(fingerprintOf).join(",");
    if (fingerprintsOfBundle.size >= REMEMBERED_BUNDLES) fingerprintsOfBundle.delete(fingerprintsOfBundle.keys().next().value!);
    fingerprintsOfBundle.set(pem, trusts);
  }
  return trusts;
}

/**
 * The authority from its bundle's PEM and its sealed key file's text: the certificate in the
 * bundle whose key it is issues. Throws an Error saying what is wrong.
 */
export async function openAuthority(mk: MasterKey, bundlePem: string, sealedKeyText: string): Promise<Authority> {
  const keyPem = openCaKey(mk, sealedKeyText);
  const key = createPrivateKey(keyPem);
  const certs = certificatesOf(bundlePem);
  if (certs.length === 0) throw new Error("its bundle holds no PEM certificate");
  const own = certs.find((c) => c.checkPrivateKey(key));
  if (!own) throw new Error("its key is the key of no certificate in its bundle");
  if (!own.ca) throw new Error("its certificate is not a certificate authority's (basicConstraints CA:FALSE)");
  return { bundlePem: bundleOf(certs), certificate: new x509.X509Certificate(own.toString()), key: await importPrivate(keyPem) };
}

/** Reads and opens the authority in `files`; throws an Error saying what is wrong. */
export async function readAuthority(files: Pick<CaFiles, "certFile" | "keyFile">, mk: MasterKey): Promise<Authority> {
  return openAuthority(mk, readFileSync(files.certFile, "utf8"), readFileSync(files.keyFile, "utf8"));
}

/** Where a rotation of the authority stands, from its files alone. */
export type CaRotationStep = "none" | "introduced" | "switched";

/**
 * `introduced`: a next key is there (step 1 begun; its certificate may not be in the bundle yet
 * if the step was cut short, which {@link beginCaRotation} completes); `switched`: the bundle
 * holds authorities besides the issuing one (step 2 done, step 3 not); `none` otherwise.
 */
export async function caRotationStep(files: CaFiles, mk: MasterKey): Promise<CaRotationStep> {
  if (existsSync(files.nextKeyFile)) return "introduced";
  const ca = await readAuthority(files, mk);
  return certificatesOf(ca.bundlePem).length > 1 ? "switched" : "none";
}

/**
 * Step 1: a next authority, its key sealed beside the current one and its certificate added to
 * the bundle; its fingerprint. The key is written first, so a step cut short between the two
 * writes leaves a key whose certificate is made when the step runs again (never a certificate
 * in the bundle whose key is lost, which would read as step 2 done). Resumable.
 */
export async function beginCaRotation(files: CaFiles, mk: MasterKey, now = new Date()): Promise<string> {
  const current = await readAuthority(files, mk);
  if (!existsSync(files.nextKeyFile)) writePrivate(files.nextKeyFile, sealCaKey(mk, newPrivateKeyPem()));
  const nextKeyPem = openCaKey(mk, readFileSync(files.nextKeyFile, "utf8"));
  const bundle = certificatesOf(current.bundlePem);
  let next = bundle.find((c) => c.checkPrivateKey(createPrivateKey(nextKeyPem)));
  if (!next) {
    next = new X509Certificate((await newAuthority(now, nextKeyPem)).certificatePem);
    writePrivate(files.certFile, bundleOf([...bundle, next]));
  }
  return fingerprintOf(next);
}

/** Step 2: the next key becomes the issuing one; the old key is gone. Idempotent once done. */
export async function switchCaIssuer(files: CaFiles, mk: MasterKey): Promise<void> {
  if (!existsSync(files.nextKeyFile)) return;
  const text = readFileSync(files.nextKeyFile, "utf8");
  await openAuthority(mk, readFileSync(files.certFile, "utf8"), text); // its certificate is in the bundle
  renameSync(files.nextKeyFile, files.keyFile);
}

/** Step 3: the bundle keeps only the issuing authority. Idempotent. */
export async function dropRetiredAuthorities(files: CaFiles, mk: MasterKey): Promise<void> {
  const ca = await readAuthority(files, mk);
  writePrivate(files.certFile, bundleOf([new X509Certificate(ca.certificate.toString("pem"))]));
}

/** What a certificate is issued for. */
export interface CertificateSpec {
  /** The holder's private key (PKCS #8 PEM); the certificate carries its public half. */
  keyPem: string;
  dnsNames: readonly string[];
  ipAddresses: readonly string[];
  lifetimeMs: number;
  usage: CertificateUsage;
}

const USAGES: Record<CertificateUsage, string[]> = {
  server: [x509.ExtendedKeyUsage.serverAuth],
  client: [x509.ExtendedKeyUsage.clientAuth],
  both: [x509.ExtendedKeyUsage.serverAuth, x509.ExtendedKeyUsage.clientAuth],
};

/** Issues a certificate under `ca` for `spec`, valid from {@link BACKDATE_MS} before `now`; its PEM. */
export async function issueCertificate(ca: Authority, spec: CertificateSpec, now = new Date()): Promise<string> {
  const names = [...spec.dnsNames.map((value) => ({ type: "dns" as const, value })), ...spec.ipAddresses.map((value) => ({ type: "ip" as const, value }))];
  if (names.length === 0) throw new Error("a certificate needs at least one DNS name or IP address");
  const publicKey = await importPublicOf(spec.keyPem);
  const cn = spec.dnsNames[0] ?? spec.ipAddresses[0]!;
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: newSerial(),
    subject: `CN=${cn}`,
    issuer: ca.certificate.subject,
    notBefore: new Date(now.getTime() - BACKDATE_MS),
    notAfter: new Date(now.getTime() + spec.lifetimeMs),
    signingKey: ca.key,
    publicKey,
    signingAlgorithm: ECDSA_P256,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension(USAGES[spec.usage]),
      new x509.SubjectAlternativeNameExtension(names),
      await x509.AuthorityKeyIdentifierExtension.create(ca.certificate),
      await x509.SubjectKeyIdentifierExtension.create(publicKey),
    ],
  });
  return cert.toString("pem");
}

/** What a held certificate is, as {@link checkCertificate} found it. */
export type CertificateCheck =
  | { ok: true; serial: string; notAfter: Date; dnsNames: string[]; ipAddresses: string[] }
  | { ok: false; problem: "malformed" | "untrusted" | "key-mismatch" | "expired" | "not-yet-valid"; message: string };

/** The DNS names and IP addresses of a certificate's subjectAltName. */
export function subjectAltNames(cert: X509Certificate): { dnsNames: string[]; ipAddresses: string[] } {
  const dnsNames: string[] = [];
  const ipAddresses: string[] = [];
  for (const entry of (cert.subjectAltName ?? "").split(/,\s*/)) {
    const [type, ...rest] = entry.split(":");
    const value = rest.join(":");
    if (type === "DNS") dnsNames.push(value);
    else if (type === "IP Address" && isIP(value)) ipAddresses.push(value);
  }
  return { dnsNames, ipAddresses };
}

/**
 * Checks a held certificate as a TLS peer would, and more: it parses, chains to one of the
 * authorities in `caPem` (a bundle), matches `keyPem`, and is valid at `now`. Pure but for the
 * clock it is given.
 */
export function checkCertificate(held: { certPem: string; keyPem: string; caPem: string }, now = new Date()): CertificateCheck {
  let cert: X509Certificate;
  let authorities: X509Certificate[];
  try {
    const chain = certificatesOf(held.certPem);
    if (!chain[0]) return { ok: false, problem: "malformed", message: "tls.crt holds no PEM certificate" };
    cert = chain[0];
    authorities = certificatesOf(held.caPem);
  } catch (e) {
    return { ok: false, problem: "malformed", message: `a certificate does not parse: ${(e as Error).message}` };
  }
  if (authorities.length === 0) return { ok: false, problem: "malformed", message: "ca.crt holds no PEM certificate" };
  if (!authorities.some((ca) => cert.checkIssued(ca) && cert.verify(ca.publicKey))) {
    return { ok: false, problem: "untrusted", message: `certificate ${cert.serialNumber} (${cert.subject.trim()}) is not signed by the authority in ca.crt` };
  }
  try {
    if (!cert.checkPrivateKey(createPrivateKey(held.keyPem))) {
      return { ok: false, problem: "key-mismatch", message: `tls.key is not the key of certificate ${cert.serialNumber}` };
    }
  } catch (e) {
    return { ok: false, problem: "malformed", message: `tls.key does not parse: ${(e as Error).message}` };
  }
  const notBefore = new Date(cert.validFrom);
  const notAfter = new Date(cert.validTo);
  if (now < notBefore)
    return { ok: false, problem: "not-yet-valid", message: `certificate ${cert.serialNumber} is valid only from ${notBefore.toISOString()}` };
  if (now >= notAfter) return { ok: false, problem: "expired", message: `certificate ${cert.serialNumber} expired at ${notAfter.toISOString()}` };
  return { ok: true, serial: cert.serialNumber, notAfter, ...subjectAltNames(cert) };
}

/** Where a server reads its certificate from in a directory {@link installCertificate} keeps: one name, whatever the generation. */
export function currentCertificateFiles(dir: string): { certFile: string; keyFile: string } {
  return { certFile: join(dir, "current", "tls.crt"), keyFile: join(dir, "current", "tls.key") };
}

/**
 * Puts a certificate and its key in `dir` for a server that reads them on a reload (nats-server
 * on SIGHUP): a new directory per certificate (named by its serial), and the symlink `current`
 * renamed over to it, so the two files change together and the server's configuration, which
 * names `current/…` ({@link currentCertificateFiles}), never changes. Keeps the generation before
 * (a reload may be reading it) and removes older ones.
 */
export function installCertificate(dir: string, certPem: string, keyPem: string): { certFile: string; keyFile: string; serial: string } {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  chmodSync(dir, 0o700);
  const serial = new X509Certificate(certPem).serialNumber.toLowerCase();
  const gen = join(dir, serial);
  mkdirSync(gen, { recursive: true, mode: 0o700 });
  writePrivate(join(gen, "tls.crt"), certPem);
  writePrivate(join(gen, "tls.key"), keyPem);
  const link = join(dir, `current.${process.pid}.tmp`);
  rmSync(link, { force: true });
  symlinkSync(serial, link);
  const before = realTarget(join(dir, "current"));
  renameSync(link, join(dir, "current"));
  for (const entry of readdirSync(dir)) {
    if (entry === "current" || entry === serial || entry === before || entry.endsWith(".tmp")) continue;
    rmSync(join(dir, entry), { recursive: true, force: true });
  }
  return { ...currentCertificateFiles(dir), serial };
}

/** The directory name a symlink in its own directory points to. */
function realTarget(link: string): string | undefined {
  try {
    return readlinkSync(link);
  } catch {
    return undefined;
  }
}
