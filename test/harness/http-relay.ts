/**
 * An HTTP relay in front of a test's own server (its registry), on a free port of 127.0.0.1:
 * every request goes on to the server as it came, the Host header included (so the URLs the
 * server answers with name the relay), and its answer comes back. The relay records each
 * request, and loses the ones a test names, as a network would: before the server sees it
 * (the connection breaks while it is sent), or after the server answered (the answer never
 * arrives). Nothing is answered by the relay itself.
 */
import { createServer, request as forward } from "node:http";
import type { AddressInfo } from "node:net";

export interface RelayedRequest {
  method: string;
  /** The path and query. */
  path: string;
  /** The request's `Content-Range`, if it had one. */
  range?: string;
  /** Bytes of its body passed on to the server so far. */
  bytes: number;
  /** The server's answer; undefined while there is none, or when the server never saw it. */
  status?: number;
  /** Lost by the relay: `before` the server saw it, or `after` the server answered. */
  lost?: "before" | "after";
}

export interface HttpRelay {
  /** `http://127.0.0.1:<port>`. */
  url: string;
  /** Every request, in the order they came. */
  requests: RelayedRequest[];
  /** Loses the next request `match` takes: `before` the server sees it, or `after` it answered. */
  lose(where: "before" | "after", match: (r: RelayedRequest) => boolean): void;
  close(): Promise<void>;
}

export async function startHttpRelay(target: string): Promise<HttpRelay> {
  const to = new URL(target);
  const requests: RelayedRequest[] = [];
  const losses: Array<{ where: "before" | "after"; match: (r: RelayedRequest) => boolean }> = [];
  const server = createServer((req, res) => {
    const r: RelayedRequest = { method: req.method!, path: req.url!, bytes: 0 };
    if (req.headers["content-range"]) r.range = String(req.headers["content-range"]);
    requests.push(r);
    const at = losses.findIndex((l) => l.match(r));
    const loss = at >= 0 ? losses.splice(at, 1)[0] : undefined;
    if (loss?.where === "before") {
      r.lost = "before";
      req.socket.destroy();
      return;
    }
    const upstream = forward({ host: to.hostname, port: to.port, method: req.method, path: req.url, headers: req.headers }, (answer) => {
      r.status = answer.statusCode;
      if (loss) {
        r.lost = "after";
        answer.resume();
        answer.once("end", () => req.socket.destroy());
        return;
      }
      res.writeHead(answer.statusCode!, answer.headers);
      answer.pipe(res);
    });
    upstream.on("error", (e) => res.destroy(e));
    req.on("data", (d: Buffer) => (r.bytes += d.byteLength));
    req.pipe(upstream);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    lose: (where, match) => void losses.push({ where, match }),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
