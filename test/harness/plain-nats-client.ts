/**
 * A client that does not speak TLS: it reads the server's INFO, sends CONNECT and PING in the
 * clear, and reports everything the server said until it closed the socket (`info` undefined
 * when it sent no INFO in the clear: a route listener with TLS starts with the handshake).
 */
import { connect as tcpConnect } from "node:net";

export async function plainClient(at: { host: string; port: number }): Promise<{ said: string; info?: { tls_required?: boolean } }> {
  const said = await new Promise<string>((resolve, reject) => {
    let text = "";
    const s = tcpConnect(at.port, at.host);
    s.on("data", (d: Buffer) => {
      text += d.toString("latin1");
      if (text.includes("\r\n") && !text.includes("CONNECT_SENT")) {
        s.write("CONNECT {}\r\nPING\r\n");
        text += "CONNECT_SENT";
      }
    });
    s.on("close", () => resolve(text));
    s.on("error", () => resolve(text));
    setTimeout(() => (s.destroy(), reject(new Error(`the server did not close a plain connection: ${text}`))), 10_000);
  });
  const end = said.indexOf("\r\n");
  return { said, ...(said.startsWith("INFO") && end > 0 ? { info: JSON.parse(said.slice(said.indexOf("{"), end)) as { tls_required?: boolean } } : {}) };
}
