/** A free TCP port on 127.0.0.1, as the kernel hands it out. */
import { connect, createServer } from "node:net";

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const addr = srv.address();
      srv.close(() => (typeof addr === "object" && addr ? resolve(addr.port) : reject(new Error("no port"))));
    });
  });
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
