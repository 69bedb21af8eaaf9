/**
 * What a NATS server presents to a new client, seen the way every client of the mesh sees it:
 * the server's INFO in the clear, then (when it says `tls_required`) a TLS handshake on the same
 * socket, verified against a bundle. The one reload the mesh makes (a server certificate
 * renewed in place, then SIGHUP) is confirmed with it: only a handshake that shows the new
 * serial says the server took it.
 */
import type { X509Certificate } from "node:crypto";
import { isIP, connect as tcpConnect } from "node:net";
import { connect as tlsConnect } from "node:tls";

export interface ServedCertificate {
  /** What the server's INFO said. */
  tlsRequired: boolean;
  /** The certificate the handshake showed (verified against the bundle given); absent when the server does not speak TLS. */
  certificate?: X509Certificate;
}

/**
 * Opens one connection to `host:port`, reads the INFO, and completes a TLS handshake verified
 * against `ca` (PEM) for `servername` (default the host) when the server requires TLS. Rejects when the server
 * does not answer within `timeoutMs` or its certificate does not verify.
 */
export function servedCertificate(
  at: { host: string; port: number },
  opts: { ca: string; servername?: string; timeoutMs?: number },
): Promise<ServedCertificate> {
  return new Promise((resolve, reject) => {
    const raw = tcpConnect(at.port, at.host);
    let text = "";
    const fail = (e: Error) => {
      clearTimeout(timer);
      raw.destroy();
      reject(e);
    };
    const timer = setTimeout(
      () => fail(new Error(`NATS at ${at.host}:${at.port} sent no INFO and finished no handshake within ${opts.timeoutMs ?? 5_000} ms`)),
      opts.timeoutMs ?? 5_000,
    );
    raw.on("error", fail);
    const onData = (d: Buffer) => {
      text += d.toString("latin1");
      const end = text.indexOf("\r\n");
      if (end < 0) return;
      raw.off("data", onData);
      let info: { tls_required?: boolean };
      try {
        info = JSON.parse(text.slice(text.indexOf("{"), end)) as { tls_required?: boolean };
      } catch {
        fail(new Error(`NATS at ${at.host}:${at.port} sent no INFO but ${JSON.stringify(text.slice(0, 80))}`));
        return;
      }
      if (!info.tls_required) {
        clearTimeout(timer);
        raw.destroy();
        resolve({ tlsRequired: false });
        return;
      }
      // An IP address is verified against the certificate's IP SANs; it is never sent as the server name (RFC 6066).
      const name = opts.servername ?? at.host;
      const s = tlsConnect({ socket: raw, ca: opts.ca, host: name, ...(isIP(name) ? {} : { servername: name }) }, () => {
        clearTimeout(timer);
        const certificate = s.getPeerX509Certificate();
        s.destroy();
        resolve({ tlsRequired: true, ...(certificate ? { certificate } : {}) });
      });
      s.on("error", fail);
    };
    raw.on("data", onData);
  });
}
