/**
 * Who a process is on NATS and how it connects: the identity its environment names, and a
 * connection that reconnects forever as that identity.
 */
import { existsSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import {
  connect,
  credsAuthenticator,
  usernamePasswordAuthenticator,
  type Authenticator,
  type NatsConnection,
  type ConnectionOptions,
} from "@nats-io/transport-node";
import { ErrorCodes, MeshError, errorMessage } from "./errors.js";

export type { NatsConnection };

export const DEFAULT_NATS_URL = "nats://127.0.0.1:4222";

/**
 * The NATS identity a process connects with, from its environment:
 *
 * - `MESH_NATS_CREDENTIALS`: a standard decorated `.creds` file (a user JWT and its nkey
 *   seed), or the binding directory of a `nats.user` grant as the agent writes it (its `creds`
 *   file; `username` and `password` on a server with plain users). Read again on every connect
 *   and reconnect, so after a rotation the process comes back with the new generation.
 * - `MESH_NATS_USER` with `MESH_NATS_PASSWORD_FILE` (or `MESH_NATS_PASSWORD`): a fixed user and
 *   password, for a server with plain users.
 * - neither: no credentials (a server without authentication).
 *
 * The connection's inbox prefix is the binding's `inboxPrefix` (the only inbox its identity may
 * subscribe to, inboxes.ts), or `MESH_NATS_INBOX_PREFIX` for an identity given as a `.creds` file.
 */
export function natsIdentity(env: NodeJS.ProcessEnv = process.env): Partial<ConnectionOptions> {
  const path = env.MESH_NATS_CREDENTIALS;
  const inbox = (prefix: string | undefined): Partial<ConnectionOptions> => (prefix ? { inboxPrefix: prefix } : {});
  if (path) {
    const fail = (what: string, e: unknown) =>
      new MeshError(
        ErrorCodes.ProviderMisconfigured,
        `MESH_NATS_CREDENTIALS=${path}: cannot read ${what} (${(e as NodeJS.ErrnoException).code ?? errorMessage(e)}); it must be a .creds file, or the binding directory of a nats.user grant written by this node's agent`,
        { cause: e },
      );
    let isDir: boolean;
    try {
      isDir = statSync(path).isDirectory();
    } catch (e) {
      throw fail("it", e);
    }
    const prefixFile = join(path, "inboxPrefix");
    const prefix = env.MESH_NATS_INBOX_PREFIX || (isDir && existsSync(prefixFile) ? readFileSync(prefixFile, "utf8").trim() : undefined);
    const credsFile = isDir ? join(path, "creds") : path;
    if (!isDir || existsSync(credsFile)) {
      const read = () => {
        try {
          return readFileSync(credsFile);
        } catch (e) {
          throw fail(credsFile, e);
        }
      };
      // Fail at start, with the message above, rather than inside a reconnect.
      if (!/-----BEGIN NATS USER JWT-----/.test(read().toString("utf8"))) throw fail(credsFile, new Error("it holds no user JWT"));
      return { authenticator: jwtAuthenticator(() => read()), ...inbox(prefix) };
    }
    const read = (key: string) => () => {
      try {
        return readFileSync(join(path, key), "utf8").trim();
      } catch (e) {
        throw fail(key, e);
      }
    };
    read("username")();
    return { authenticator: usernamePasswordAuthenticator(read("username"), read("password")), ...inbox(prefix) };
  }
  const user = env.MESH_NATS_USER;
  if (!user) return {};
  let pass = env.MESH_NATS_PASSWORD;
  if (env.MESH_NATS_PASSWORD_FILE) {
    try {
      pass = readFileSync(env.MESH_NATS_PASSWORD_FILE, "utf8").trim();
    } catch (e) {
      throw new MeshError(
        ErrorCodes.ProviderMisconfigured,
        `MESH_NATS_PASSWORD_FILE=${env.MESH_NATS_PASSWORD_FILE}: cannot read it (${(e as NodeJS.ErrnoException).code ?? errorMessage(e)}); make it readable by this process`,
        { cause: e },
      );
    }
  }
  return { user, ...(pass !== undefined ? { pass } : {}), ...inbox(env.MESH_NATS_INBOX_PREFIX) };
}

/**
 * Logs in with a `.creds` file's user JWT, signing the server's nonce with its seed, and sends
 * the JWT and the signature alone. The client's own `credsAuthenticator` sends the user's public
 * key as `nkey` too, which nats-server 2.9.10 takes, at every reload of its configuration (the
 * renewal of its certificate), for a user of its configuration that is gone, and closes the
 * connection (server/reload.go, clientHasMovedToDifferentAccount: `s.nkeys` is empty in operator
 * mode); without it the server checks the JWT again and keeps the connection.
 */
export function jwtAuthenticator(creds: Uint8Array | (() => Uint8Array)): Authenticator {
  const signed = credsAuthenticator(creds);
  return (nonce?: string) => {
    const { nkey: _, ...auth } = signed(nonce) as { nkey?: string; jwt: string; sig?: string };
    return auth;
  };
}

/**
 * How a process trusts its NATS server's certificate: `MESH_NATS_CA_FILE` (a PEM bundle, such as
 * the mesh's `ca.crt`), or else the `ca.crt` of the binding directory `MESH_NATS_CREDENTIALS`
 * names. The file is read again at every connect and reconnect, so a bundle renewed in place
 * (the authority's rotation) is taken. With one, the client requires TLS and verifies the server
 * against it alone; without, it speaks TLS only where the server asks, trusting the system's
 * authorities.
 */
export function natsTls(env: NodeJS.ProcessEnv = process.env): Partial<ConnectionOptions> {
  const explicit = env.MESH_NATS_CA_FILE;
  if (explicit) {
    try {
      if (!/-----BEGIN CERTIFICATE-----/.test(readFileSync(explicit, "utf8"))) throw new Error("it holds no PEM certificate");
    } catch (e) {
      throw new MeshError(
        ErrorCodes.ProviderMisconfigured,
        `MESH_NATS_CA_FILE=${explicit}: cannot use it (${(e as NodeJS.ErrnoException).code ?? errorMessage(e)}); it must be a PEM bundle of the authorities that sign the server's certificate, such as the mesh's ca.crt`,
        { cause: e },
      );
    }
    return { tls: { caFile: explicit } };
  }
  const binding = env.MESH_NATS_CREDENTIALS;
  if (binding) {
    const bundle = join(binding, "ca.crt");
    try {
      if (statSync(binding).isDirectory() && existsSync(bundle)) return { tls: { caFile: bundle } };
    } catch {
      // natsIdentity says what is wrong with it
    }
  }
  return {};
}

/** True for an error of a TLS handshake whose server certificate was not trusted. */
export function isUntrustedServer(e: unknown): boolean {
  return /self[- ]signed|unable to (get|verify)|certificate|altnames/i.test(errorMessage(e));
}

/**
 * Connects to NATS with unlimited reconnects, as the identity {@link natsIdentity} finds in the
 * environment (unless `opts` says otherwise); the error says which URL failed and what to check.
 */
export async function connectNats(url: string = process.env.NATS_URL || DEFAULT_NATS_URL, opts: Partial<ConnectionOptions> = {}): Promise<NatsConnection> {
  const identity = natsIdentity();
  const tls = natsTls();
  try {
    // ignoreAuthErrorAbort: a refused identity is tried again (the agent may be writing the
    // binding that holds the new one) rather than the client giving up after two refusals.
    // noAsyncTraces: the client otherwise builds two Errors with stack traces for every request
    // (5 % of the verifier's CPU in a profile of a pass over 1,000 grants, bench/verify.bench.ts);
    // the mesh's errors say what failed in their message.
    return await connect({
      servers: url.split(","),
      maxReconnectAttempts: -1,
      reconnectTimeWait: 500,
      ignoreAuthErrorAbort: true,
      noAsyncTraces: true,
      ...identity,
      ...tls,
      ...opts,
    });
  } catch (e) {
    if (/authorization violation|authentication/i.test(errorMessage(e))) {
      throw new MeshError(
        ErrorCodes.ProviderMisconfigured,
        `NATS at ${url} refused this process's identity (${errorMessage(e)}): check MESH_NATS_CREDENTIALS (a .creds file, or a nats.user binding), or MESH_NATS_USER and its password, against the identities the server knows`,
        { cause: e },
      );
    }
    if (isUntrustedServer(e)) {
      throw new MeshError(
        ErrorCodes.ProviderUnreachable,
        `NATS at ${url} speaks TLS with a certificate this process does not trust (${errorMessage(e)}): name the bundle of the authority that signed it in MESH_NATS_CA_FILE (the mesh's own: the ca.crt of its certificate authority, .mesh/mesh-ca/ca.crt under meshctl up)${tls.tls ? `; the bundle given (${(tls.tls as { caFile?: string }).caFile}) does not hold it` : ""}`,
        { cause: e, retryable: true },
      );
    }
    throw new MeshError(
      ErrorCodes.ProviderUnreachable,
      `cannot connect to NATS at ${url}: ${errorMessage(e)}. Start a nats-server with JetStream (nats-server -js) or set NATS_URL.`,
      { cause: e, retryable: true },
    );
  }
}
