/**
 * A client that asks an HTTPS server every `everyMs` on a new connection (so each request is a
 * TLS handshake), as a holder's peer would through a rotation: what it sent, what failed and the
 * certificate each answer came with.
 */
import { request, type RequestOptions } from "node:https";
import type { PeerCertificate, TLSSocket } from "node:tls";

export interface HttpsAsker {
  /** Requests sent so far. */
  sent(): number;
  /** Each failed request's error, in order. */
  readonly failures: string[];
  /** Asks no more, once the request in flight has ended. */
  stop(): Promise<void>;
}

/** Starts asking; `options` is read again for each request (a client that follows its binding reads its files each time). */
export function askEvery(everyMs: number, options: () => RequestOptions, onAnswer: (server: PeerCertificate) => void = () => {}): HttpsAsker {
  const failures: string[] = [];
  let sent = 0;
  let asking = true;
  const ask = () =>
    new Promise<void>((resolve) => {
      sent++;
      const req = request({ path: "/", agent: false, ...options() }, (res) => {
        onAnswer((res.socket as TLSSocket).getPeerCertificate());
        res.resume();
        res.on("end", () => resolve());
      });
      req.on("error", (e) => {
        failures.push(e.message);
        resolve();
      });
      req.end();
    });
  const loop = (async () => {
    while (asking) {
      await ask();
      await new Promise((r) => setTimeout(r, everyMs));
    }
  })();
  return {
    sent: () => sent,
    failures,
    stop: async () => {
      asking = false;
      await loop;
    },
  };
}
