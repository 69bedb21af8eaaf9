/**
 * The TLS of the NATS server `meshctl up` and `meshctl bootstrap` run: a server certificate of
 * the mesh's authority, issued when the server starts and renewed while it runs.
 *
 * This is the one reload the mesh makes. The server's configuration names `tls/current/tls.crt`
 * and `tls/current/tls.key`; a renewal writes both into a new directory and renames the link
 * over (so the server never reads a certificate with another generation's key), then sends the
 * server SIGHUP. nats-server 2.9.10 reloads its certificate on SIGHUP and keeps the connections
 * it has (a reload changes only what new handshakes see); the configuration itself never
 * changes, so the reload cannot take anything else with it. The renewal counts as done only
 * once a new handshake shows the new serial.
 */
import { X509Certificate } from "node:crypto";
import { readFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { errorMessage, type MasterKey } from "@mesh/shared";
import { servedCertificate } from "@mesh/shared/runtime";
import { readAuthority, type CaFiles, type OperatorFiles } from "@mesh/providers";
import { issueServerCertificate, type ServerCertificate } from "./bootstrap.js";

/** How long the server certificate of a server up starts is valid unless `--nats-tls-lifetime` says: renewed at two thirds, like any certificate of the mesh. */
export const UP_NATS_TLS_LIFETIME = "24h";

/** How often the keeper looks whether the authority issues under another key (`meshctl ca rotate`), so the server follows within seconds. */
const AUTHORITY_CHECK_MS = 2_000;

/** How long a renewal waits for a handshake to show the new serial after SIGHUP. */
const RELOAD_CONFIRM_MS = 15_000;

export interface ServerTlsOptions {
  files: OperatorFiles;
  ca: CaFiles;
  masterKey: MasterKey;
  /** Where the server listens: its certificate names it (`127.0.0.1`, and `localhost`). */
  host: string;
  port: number;
  lifetimeMs: number;
}

/** Issues the server's certificate for `host` (an IP address, with `localhost`) under the authority's current key. */
export function issueUpServerCertificate(o: ServerTlsOptions): Promise<ServerCertificate> {
  return issueServerCertificate(o.files, { ca: o.ca, masterKey: o.masterKey, dnsNames: ["localhost"], ipAddresses: [o.host], lifetimeMs: o.lifetimeMs });
}

/** When a certificate issued for `lifetimeMs` is renewed: at two thirds of that lifetime (its `notBefore` is set back a little for slow clocks, which does not count). */
export function renewalDue(c: Pick<ServerCertificate, "notAfter">, lifetimeMs: number): Date {
  return new Date(c.notAfter.getTime() - lifetimeMs / 3);
}

/** True when the authority's current issuing certificate did not sign `served` (the authority was rotated since). */
export async function issuedByAnother(o: Pick<ServerTlsOptions, "ca" | "masterKey">, served: X509Certificate): Promise<boolean> {
  const issuing = new X509Certificate((await readAuthority(o.ca, o.masterKey)).certificate.toString("pem"));
  return !served.checkIssued(issuing) || !served.verify(issuing.publicKey);
}

/**
 * Renews the server's certificate: issues and installs it, sends the server (`pid`) SIGHUP, and
 * waits until a new handshake shows the new serial. Throws saying what the server presents
 * instead when it does not within {@link RELOAD_CONFIRM_MS}.
 */
export async function renewServerCertificate(o: ServerTlsOptions & { pid: number }): Promise<ServerCertificate> {
  const next = await issueUpServerCertificate(o);
  process.kill(o.pid, "SIGHUP");
  const deadline = Date.now() + RELOAD_CONFIRM_MS;
  let seen: string;
  for (;;) {
    try {
      const served = await servedCertificate({ host: o.host, port: o.port }, { ca: readFileSync(o.ca.certFile, "utf8"), timeoutMs: 5_000 });
      const serial = served.certificate?.serialNumber.toLowerCase();
      if (serial === next.serial) return next;
      seen = `serial ${serial ?? "none"}`;
    } catch (e) {
      seen = errorMessage(e);
    }
    if (Date.now() > deadline) {
      throw new Error(
        `sent the NATS server (pid ${o.pid}) SIGHUP after installing certificate ${next.serial}, but a new handshake still shows ${seen} after ${RELOAD_CONFIRM_MS / 1000} s; see its log`,
      );
    }
    await sleep(200);
  }
}

/**
 * Keeps the server's certificate current while `signal` is not aborted: renews it at two thirds
 * of its lifetime, and at once when the authority issues under another key. Says each renewal
 * (or why one failed, retried after a while) through `onEvent`.
 */
export async function keepServerCertificate(
  o: ServerTlsOptions & { pid: number; current: ServerCertificate; signal: AbortSignal; onEvent: (line: string) => void },
): Promise<void> {
  let current = o.current;
  let served = new X509Certificate(readFileSync(current.certFile));
  let retryAt = 0;
  while (!o.signal.aborted) {
    await sleep(AUTHORITY_CHECK_MS, undefined, { signal: o.signal }).catch(() => undefined);
    if (o.signal.aborted || Date.now() < retryAt) continue;
    try {
      const due = Date.now() >= renewalDue(current, o.lifetimeMs).getTime();
      const rotated = !due && (await issuedByAnother(o, served));
      if (!due && !rotated) continue;
      current = await renewServerCertificate(o);
      served = new X509Certificate(readFileSync(current.certFile));
      o.onEvent(
        `renewed the NATS server's certificate (${rotated ? "the authority issues under a new key" : "two thirds of its lifetime passed"}): serial ${current.serial}, valid until ${current.notAfter.toISOString()}; the server presents it`,
      );
    } catch (e) {
      retryAt = Date.now() + 30_000;
      o.onEvent(
        `could not renew the NATS server's certificate (${errorMessage(e)}); trying again in 30 s, before the one it presents expires on ${current.notAfter.toISOString()}`,
      );
    }
  }
}
