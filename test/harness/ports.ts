/** Free TCP ports on 127.0.0.1 for the tests' own servers, and waiting for one to listen. */
import { readFileSync } from "node:fs";
import { connect, createServer } from "node:net";

/** Where ports are handed out from: below the kernel's ephemeral range, read from /proc (1024 up to it). */
const HANDED_OUT = ((): { from: number; to: number } | undefined => {
  try {
    const low = Number(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0]);
    // Room for thousands of servers at once, else the kernel's own choice.
    return low >= 12_000 ? { from: Math.max(10_000, low - 12_000), to: low - 1 } : undefined;
  } catch {
    return undefined;
  }
})();
/** Ports this process handed out already: never twice, so two servers started at once do not race for one. */
const given = new Set<number>();

/** Listens on `port` (0: one the kernel picks) for a moment; resolves with the port, or undefined when it is taken. */
function tryListen(port: number): Promise<number | undefined> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.unref();
    srv.once("error", () => resolve(undefined));
    srv.listen(port, "127.0.0.1", () => {
      const addr = srv.address();
      srv.close(() => resolve(typeof addr === "object" && addr ? addr.port : undefined));
    });
  });
}

/**
 * A free TCP port on 127.0.0.1, chosen at random below the kernel's ephemeral range. A server a
 * test stops and starts again on the same port must find it free: a port of the ephemeral range
 * may meanwhile be the local end of any outgoing connection (the tests make thousands), and a
 * cluster member restarted on its ports could not listen on its monitoring port, taken that way.
 * Below that range only another listener can take it, and this process never hands one out twice.
 */
export async function freePort(): Promise<number> {
  if (HANDED_OUT) {
    for (let i = 0; i < 64; i++) {
      const port = HANDED_OUT.from + Math.floor(Math.random() * (HANDED_OUT.to - HANDED_OUT.from + 1));
      if (given.has(port)) continue;
      if ((await tryListen(port)) !== undefined) {
        given.add(port);
        return port;
      }
    }
  }
  const port = await tryListen(0);
  if (port === undefined) throw new Error("no free TCP port on 127.0.0.1");
  return port;
}

/** Whether something accepts a TCP connection on 127.0.0.1:`port` now (within `timeoutMs`). */
export function accepts(port: number, timeoutMs = 2_000): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect(port, "127.0.0.1");
    s.setTimeout(timeoutMs, () => (s.destroy(), resolve(false)));
    s.once("connect", () => (s.destroy(), resolve(true)));
    s.once("error", () => resolve(false));
  });
}

/** Resolves once something accepts TCP connections on 127.0.0.1:`port`, or rejects after `timeoutMs`. */
export async function waitForPort(port: number, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await accepts(port)) return;
    if (Date.now() > deadline) throw new Error(`nothing listens on 127.0.0.1:${port} after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
