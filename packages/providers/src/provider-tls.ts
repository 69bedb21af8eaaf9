/**
 * A provider's `tls:` as its adapter uses it: the bundle its server's certificate is verified
 * against and the name that certificate must hold; and a failed handshake said as what
 * happened and what to do. Every connection to such a server verifies it: there is no mode
 * that encrypts without verifying, and none that falls back to plain text.
 */
import { readFileSync } from "node:fs";
import { isIP } from "node:net";
import { join } from "node:path";
import { checkServerIdentity, type PeerCertificate } from "node:tls";
import { Agent, fetch as undiciFetch } from "undici";
import { DEFAULT_STATE_DIR, ErrorCodes, MeshError, StateFiles, errorMessage, type ProviderDoc } from "@mesh/shared";
import type { BindingValues, LoginResult, ProviderConfig, ServerTls } from "./adapter.js";
import { trustsOf } from "./mesh-ca.js";

/** The mesh's own authority's bundle on this node: `mesh-ca/ca.crt` in the state directory (`MESH_STATE_DIR`, default `.mesh`). */
export function meshCaBundleFile(env: NodeJS.ProcessEnv): string {
  return join(env.MESH_STATE_DIR || DEFAULT_STATE_DIR, StateFiles.caDir, "ca.crt");
}

/**
 * The provider's `tls:` resolved here: its `ca`, or for `mesh: true` the mesh's bundle read now
 * (so a bundle that gained an authority in a rotation of the CA is used at once), with the
 * fingerprints of its authorities. Throws `ProviderMisconfigured` when that bundle cannot be
 * read on this node, or holds no certificate that can be.
 */
export function resolveProviderTls(doc: Pick<ProviderDoc, "name" | "tls">, env: NodeJS.ProcessEnv): ServerTls | undefined {
  const tls = doc.tls;
  if (!tls) return undefined;
  let ca = tls.ca;
  if (ca === undefined) {
    const file = meshCaBundleFile(env);
    try {
      ca = readFileSync(file, "utf8");
    } catch (e) {
      throw new MeshError(
        ErrorCodes.ProviderMisconfigured,
        `provider ${doc.name}: tls.mesh verifies the server against the mesh's certificate authority, whose bundle ${file} this service cannot read (${(e as NodeJS.ErrnoException).code ?? errorMessage(e)}); run it with MESH_STATE_DIR naming the state directory meshctl up or bootstrap made, or give the bundle itself as tls.ca`,
        { cause: e },
      );
    }
  }
  const source = tls.ca === undefined ? "the mesh's bundle" : "tls.ca";
  let trusts: string;
  try {
    trusts = trustsOf(ca);
  } catch (e) {
    throw new MeshError(
      ErrorCodes.ProviderMisconfigured,
      `provider ${doc.name}: ${source} holds a certificate that cannot be read (${errorMessage(e)}); give the PEM of the authorities that sign the server's certificate`,
      { cause: e },
    );
  }
  if (!trusts) {
    throw new MeshError(
      ErrorCodes.ProviderMisconfigured,
      `provider ${doc.name}: ${source} holds no certificate; give the PEM of the authorities that sign the server's certificate`,
    );
  }
  return { ca, trusts, ...(tls.serverName ? { serverName: tls.serverName } : {}) };
}

/**
 * For a provider with `tls:` reached over HTTP (a registry): throws `ProviderMisconfigured` unless
 * each of `urls` (what it is → the URL) is `https://`, and when it says `tls.serverName`, which
 * the holders' `client` cannot honour (it checks the host the URL names).
 */
export function checkHttpsTls(provider: Pick<ProviderConfig, "name" | "tls">, client: string, urls: Record<string, string>): void {
  if (!provider.tls) return;
  for (const [what, url] of Object.entries(urls)) {
    if (!/^https:/i.test(url)) {
      throw new MeshError(
        ErrorCodes.ProviderMisconfigured,
        `provider ${provider.name} says tls, but its ${what} ${url} is not https://; name the server's HTTPS URL (passwords go there, never in plain text), or leave tls out`,
      );
    }
  }
  if (provider.tls.serverName) {
    throw new MeshError(
      ErrorCodes.ProviderMisconfigured,
      `provider ${provider.name}: ${client} checks the server's certificate for the host its URL names, so tls.serverName cannot be honoured; name the server in the URL as its certificate does, and leave tls.serverName out`,
    );
  }
}

/** What a grant's resource records of `tls`: the authorities its holders' bindings trust (`meshctl ca rotate` reads it, as of `nats.user`). */
export function trustsResource(tls: ServerTls | undefined): Record<string, string> {
  return tls?.trusts ? { trusts: tls.trusts } : {};
}

/**
 * Node's `tls.connect` options that verify the server against `tls`: the bundle alone (not the
 * system's authorities) and the name `tls.serverName`, else `host`, checked whatever name the
 * driver puts in the handshake (node-postgres puts the host there, over an option's name).
 */
export function verifyingOptions(tls: ServerTls, host: string) {
  const name = tls.serverName ?? host;
  return {
    ca: tls.ca,
    rejectUnauthorized: true,
    // SNI carries a DNS name only (RFC 6066); the check below holds for an IP address too.
    ...(isIP(name) === 0 ? { servername: name } : {}),
    checkServerIdentity: (_host: string, cert: PeerCertificate) => checkServerIdentity(name, cert),
  };
}

/** Agents of {@link verifyingFetch} by name and bundle: a connection pool each, kept for the next call (a verifier logs in every interval). */
const agents = new Map<string, Agent>();
/** Bundles and names in use at once are few (a CA rotation makes two); past this, the oldest agent is dropped, its idle connections closing on their own. */
const MAX_AGENTS = 32;

/**
 * `fetch` of `url`, verifying an `https://` server against `tls` ({@link verifyingOptions}: the
 * bundle alone, the name `tls.serverName` or else the URL's host), through undici, the library
 * Node's own fetch is built on (which cannot be given a bundle); without `tls`, Node's fetch and
 * its trust store. A failed handshake rejects as fetch does, the TLS error as its `cause`; an
 * `http://` URL with `tls` is refused (`ProviderMisconfigured`), never asked in plain text.
 */
export async function verifyingFetch(url: string | URL, init: RequestInit, tls: ServerTls | undefined): Promise<Response> {
  if (!tls) return fetch(url, init);
  if (new URL(url).protocol !== "https:") {
    throw new MeshError(
      ErrorCodes.ProviderMisconfigured,
      `${String(url)} is not https://, and a server to verify is never asked in plain text; name its HTTPS URL`,
    );
  }
  // The host as the certificate names it: an IPv6 address without its brackets.
  const name = tls.serverName ?? new URL(url).hostname.replace(/^\[(.*)\]$/, "$1");
  const key = `${name}\0${tls.ca}`;
  let agent = agents.get(key);
  if (!agent) {
    agent = new Agent({ connect: verifyingOptions(tls, name) });
    agents.set(key, agent);
    if (agents.size > MAX_AGENTS) agents.delete(agents.keys().next().value!);
  }
  // undici's Response is the one Node's fetch returns, under types of its own.
  return (await undiciFetch(url, { ...(init as object), dispatcher: agent })) as unknown as Response;
}

/** OpenSSL's codes for a chain that does not lead to an authority of the bundle. */
const UNKNOWN_AUTHORITY = new Set([
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "UNABLE_TO_GET_ISSUER_CERT",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
  "SELF_SIGNED_CERT_IN_CHAIN",
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "CERT_SIGNATURE_FAILURE",
  "CERT_UNTRUSTED",
]);

/**
 * OpenSSL's and Node's messages for a failed verification, for drivers that pass the message on
 * under a code of their own (mysql2: `HANDSHAKE_SSL_ERROR`), as the code Node gives it.
 */
const VERIFICATION_MESSAGES: ReadonlyArray<readonly [RegExp, string]> = [
  [/Hostname\/IP does not match certificate's altnames/i, "ERR_TLS_CERT_ALTNAME_INVALID"],
  [/certificate has expired/i, "CERT_HAS_EXPIRED"],
  [/certificate is not yet valid/i, "CERT_NOT_YET_VALID"],
  [/self[- ]signed certificate|unable to verify the first certificate|unable to get (local )?issuer certificate/i, "UNABLE_TO_VERIFY_LEAF_SIGNATURE"],
];

/** `code` when Node gave one of its own, else the code of a verification failure `message` names. */
function verificationCode(code: string, message: string): string {
  if (code && code !== "HANDSHAKE_SSL_ERROR") return code;
  return VERIFICATION_MESSAGES.find(([pattern]) => pattern.test(message))?.[1] ?? code;
}

/** OpenSSL's reason out of its error line (`…:SSL routines:ssl3_get_record:wrong version number:…` → `wrong version number`), on one line. */
function readable(message: string): string {
  return /SSL routines:[^:]*:([^:]+)/.exec(message)?.[1] ?? message.replace(/\s+/g, " ").trim();
}

/**
 * Why a TLS connection to a provider's server failed, as a clause (`its certificate is not for
 * 127.0.0.1 (…): …`) that says what to do; undefined when `e` is not a failure of TLS. A server
 * that waits for a command in plain text does not answer a handshake at all: a connection
 * `overTls` that timed out says so.
 */
export function tlsFailure(failure: unknown, overTls = false): string | undefined {
  // fetch rejects with "fetch failed", the connection's error as its cause.
  const e = failure instanceof TypeError && failure.cause ? failure.cause : failure;
  const err = e as { code?: unknown; reason?: unknown; message?: unknown } | undefined;
  const why = readable(errorMessage(e));
  const code = verificationCode(typeof err?.code === "string" ? err.code : "", why);
  if (overTls && code === "ETIMEDOUT") {
    return `it answered no TLS handshake in time (${why}): it is unreachable, or does not speak TLS at that port (nothing falls back to plain text)`;
  }
  if (code === "ERR_TLS_CERT_ALTNAME_INVALID") {
    return `its certificate is not for the name checked (${typeof err?.reason === "string" ? err.reason : why}): give the server a certificate for the host the endpoint names, or (where the kind takes it) set tls.serverName to a name its certificate holds`;
  }
  if (code === "CERT_HAS_EXPIRED") return `its certificate has expired (${code}): renew the server's certificate`;
  if (code === "CERT_NOT_YET_VALID") return `its certificate is not valid yet (${code}): check the clocks of the server and of this node`;
  if (UNKNOWN_AUTHORITY.has(code)) {
    return `its certificate is not signed by an authority of the provider's tls bundle (${code}): give tls.ca the authority that signs it, or give the server a certificate of that authority`;
  }
  // PostgreSQL, MariaDB, OpenSSL meeting plain text, and nats.js meeting a server without TLS.
  if (/does not support SSL|does not support secure connection|does not support 'tls'|wrong version number|packet length too long/i.test(why)) {
    return `it does not speak TLS (${why}): turn TLS on at the server, or leave tls out of the provider (nothing falls back to plain text)`;
  }
  if (code.startsWith("ERR_SSL_") || code.startsWith("ERR_TLS_") || code === "EPROTO") return `the TLS handshake failed (${why})`;
  return undefined;
}

/**
 * An admin operation's failure to reach the server over verified TLS, as `ProviderUnreachable`
 * saying why and what to do (`at`: which provider, where); undefined for any other failure.
 */
export function unverifiedServer(at: string, what: string, e: unknown, overTls = false): MeshError | undefined {
  const tls = tlsFailure(e, overTls);
  return tls
    ? new MeshError(ErrorCodes.ProviderUnreachable, `${at} cannot be reached over verified TLS, so could not ${what}: ${tls}`, { retryable: true, cause: e })
    : undefined;
}

/** A login's failure to reach the server over verified TLS (`server`: `PostgreSQL at host:port`); undefined for any other failure. */
export function unverifiedLogin(server: string, e: unknown, overTls = false): LoginResult | undefined {
  const tls = tlsFailure(e, overTls);
  return tls ? { ok: false, reason: "unreachable", message: `cannot reach ${server} over verified TLS: ${tls}` } : undefined;
}

/**
 * The binding keys of a server reached over TLS, in servicebinding.io's layout: the bundle as
 * `ca.crt`, and `servername` when the certificate must be checked for another name than `host`.
 */
export function caBindings(tls: ServerTls | undefined): BindingValues {
  if (!tls) return {};
  return { "ca.crt": tls.ca, ...(tls.serverName ? { servername: tls.serverName } : {}) };
}

/** What a login with binding `b` verifies the server with: its `ca.crt` and `servername` ({@link caBindings}); undefined without a bundle. */
export function bindingCa(b: BindingValues): ServerTls | undefined {
  const ca = b["ca.crt"];
  return ca ? { ca, ...(b.servername ? { serverName: b.servername } : {}) } : undefined;
}
