/** `HOST:PORT` as an option or a variable names where something listens (`--listen`, `--nats-monitor`, `MESH_METRICS_LISTEN`). */
import { isIP } from "node:net";

/** An address to listen on. */
export interface ListenAddress {
  /** As given, without brackets (`127.0.0.1`, `::1`, `localhost`, `0.0.0.0`). */
  host: string;
  port: number;
}

/** Parses `HOST:PORT` (`[::1]:8470` for IPv6, port 0 to 65535); undefined when `spec` is not that. */
export function parseHostPort(spec: string): ListenAddress | undefined {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(spec.trim());
  const port = m ? Number(m[3]) : NaN;
  return m && port <= 65535 ? { host: (m[1] ?? m[2])!, port } : undefined;
}

/** Formats a host for a URL or a Host header (`[::1]`). */
export function hostForUrl(host: string): string {
  return isIP(host) === 6 ? `[${host}]` : host;
}

/** True for `localhost`, 127.0.0.0/8 and ::1: an address no other machine reaches. */
export function isLoopback(host: string): boolean {
  if (host === "localhost") return true;
  if (isIP(host) === 4) return host.startsWith("127.");
  return isIP(host) === 6 && /^(0{0,4}:){2,7}0{0,3}1$|^::1$/.test(host);
}
