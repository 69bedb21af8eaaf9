/**
 * Who may talk to `meshctl console`, decided by pure functions: where it may listen (loopback,
 * or another address only with TLS), and which requests it answers (GET or HEAD, the token of
 * the URL it printed, a Host it serves under, and no Origin but its own). A request refused
 * gets a status and words that say what happened and what to do.
 */
import { timingSafeEqual } from "node:crypto";
import { CliError } from "../cli-error.js";
import { ExitCodes } from "../exit-codes.js";
import { hostForUrl, isLoopback, parseHostPort, type ListenAddress } from "@mesh/shared";

export { hostForUrl, type ListenAddress } from "@mesh/shared";

/** Where the console listens unless told: loopback only. */
export const DEFAULT_CONSOLE_LISTEN = "127.0.0.1:8470";

/** Parses `HOST:PORT` (`[::1]:8470` for IPv6); a bad one is a usage error (exit 2). */
export function parseListen(spec: string): ListenAddress {
  const addr = parseHostPort(spec);
  if (!addr)
    throw new CliError(
      `--listen ${JSON.stringify(spec)}: give HOST:PORT, e.g. ${DEFAULT_CONSOLE_LISTEN} ([::1]:8470 for IPv6; port 0 picks a free one)`,
      ExitCodes.Usage,
    );
  return addr;
}

export { isLoopback };

/**
 * Refuses (exit 2) to listen beyond loopback without TLS: the token in the URL would cross the
 * network in clear, and so would everything the console shows.
 */
export function checkListen(addr: ListenAddress, tls: boolean): void {
  if (isLoopback(addr.host) || tls) return;
  throw new CliError(
    `--listen ${addr.host}:${addr.port} is not a loopback address, and the console serves other addresses only over TLS: ` +
      "give --tls-cert FILE and --tls-key FILE, run it in the directory of meshctl up (it then serves a certificate of the mesh's authority), or listen on 127.0.0.1 and reach it through an SSH tunnel (ssh -L 8470:127.0.0.1:8470 HOST)",
    ExitCodes.Usage,
  );
}

/**
 * The Host header values the console answers to, once it listens on `port`: on loopback, the
 * loopback names (`127.0.0.1`, `localhost`, `[::1]`) with that port; elsewhere the address
 * given and the names in `names`. Anything else is another site's name pointed at this
 * address (DNS rebinding), and refused.
 */
export function allowedHosts(addr: ListenAddress, port: number, names: readonly string[] = []): Set<string> {
  const hosts = isLoopback(addr.host) ? ["127.0.0.1", "localhost", "[::1]", hostForUrl(addr.host)] : [hostForUrl(addr.host), ...names];
  return new Set(hosts.filter((h) => h !== "0.0.0.0" && h !== "[::]").map((h) => `${h.toLowerCase()}:${port}`));
}

/** What the console knows to decide on a request. */
export interface AccessPolicy {
  token: string;
  /** From {@link allowedHosts}. */
  hosts: ReadonlySet<string>;
  scheme: "http" | "https";
}

/** A request as far as access goes. */
export interface AccessRequest {
  method: string;
  host: string | undefined;
  origin: string | undefined;
  /** The `token` query parameter. */
  token: string | null;
}

/** Why a request is refused: the HTTP status and what to tell the user. */
export interface Refusal {
  status: 401 | 403 | 405 | 421;
  message: string;
}

function sameToken(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

/** The refusal of a request, or undefined when it may be answered. Host first: a foreign site learns nothing else. */
export function checkRequest(req: AccessRequest, policy: AccessPolicy): Refusal | undefined {
  const host = req.host?.toLowerCase();
  if (!host || !policy.hosts.has(host)) {
    return {
      status: 421,
      message: `this console does not serve the host ${JSON.stringify(req.host ?? "")}: open the URL meshctl console printed (it serves ${[...policy.hosts].join(", ")})`,
    };
  }
  if (req.origin !== undefined && req.origin !== "null" && !policy.hosts.has(originHost(req.origin, policy.scheme) ?? "")) {
    return { status: 403, message: `requests from another site (Origin ${req.origin}) are refused: the console answers only its own pages` };
  }
  if (req.origin === "null")
    return { status: 403, message: "requests from an opaque origin (Origin null) are refused: the console answers only its own pages" };
  if (req.method !== "GET" && req.method !== "HEAD") {
    return { status: 405, message: `the console is read-only: ${req.method} is refused; change the mesh with meshctl (apply, rotate, verify)` };
  }
  if (req.token === null || !sameToken(req.token, policy.token)) {
    return {
      status: 401,
      message: `${req.token === null ? "no token" : "a wrong token"} in this request: open the URL meshctl console printed on its first line (it ends in ?token=…); a restarted console has a new token`,
    };
  }
  return undefined;
}

/** `host:port` of an Origin with the console's scheme (default port filled in); undefined for another scheme or no URL. */
function originHost(origin: string, scheme: "http" | "https"): string | undefined {
  try {
    const u = new URL(origin);
    if (u.protocol !== `${scheme}:`) return undefined;
    return `${u.hostname.toLowerCase()}:${u.port || (scheme === "https" ? "443" : "80")}`;
  } catch {
    return undefined;
  }
}
