/**
 * A part's connection to the mesh's bus as its own workload identity: the binding `identity`
 * that the node's agent writes beside the part's other bindings (`type` nats, `url`, `creds`,
 * `inboxPrefix`, and the grant, module, part and node it is for). The identity may do what the
 * part needs of the mesh and nothing else: fetch and hold its own module's credentials for this
 * part (`holdCredential`), confirm its own rotations. Application traffic goes through a
 * declared `nats.user` requirement.
 *
 * The identity rotates like any credential, and this connection is one of its holders: when a
 * rotation stages a new generation, the part connects with it on a second connection first
 * (make before break), then this connection reconnects with it (what is sent meanwhile is
 * buffered by the client; its subscriptions are made again on the new socket), the second one
 * closes, and only then does it confirm: the rotation commits, and the old key is revoked,
 * once this connection no longer uses it. A move that fails is tried again until it takes.
 */
import { existsSync, readFileSync, realpathSync } from "node:fs";
import { join } from "node:path";
import { connect, type ConnectionOptions, type NatsConnection } from "@nats-io/transport-node";
import { jwtAuthenticator } from "@mesh/shared/runtime";
import { ErrorCodes, IDENTITY_BINDING, InboxRoots, MeshError, backoffMs, errorMessage, parseGrantId, sleep } from "@mesh/shared";
import { holdCredential, type CredentialHolder } from "./hold-credential.js";

/** The identity binding as the agent writes it. `creds` is secret: never log it. */
export interface IdentityBinding {
  url: string;
  /** A standard decorated `.creds` file's content; absent on a bus without authentication. */
  creds?: string;
  /**
   * The bundle the server's certificate is verified against, on a bus that requires TLS: the
   * path of the binding's `ca.crt` through the binding's link, so a reconnect reads the one the
   * agent delivered last (an authority's rotation adds its successor there first).
   */
  caFile?: string;
  inboxPrefix: string;
  /** `<module>/<identity requirement>`. */
  grant: string;
  module: string;
  part: string;
  node: string;
}

const REQUIRED = ["url", "inboxPrefix", "grant", "module", "part", "node"] as const;

/**
 * Reads the identity binding in `dir` (a part's `identity` directory, or the part's directory,
 * its `SERVICE_BINDING_ROOT`, whose `identity` it reads) at one generation: the binding is a
 * symlink the agent swaps atomically, so it is resolved once and every file read from the
 * generation it points to. Throws MeshError `NotFound` saying what is missing.
 */
export function readIdentityBinding(dir: string): IdentityBinding {
  let real: string;
  const link = existsSync(join(dir, IDENTITY_BINDING, "url")) ? join(dir, IDENTITY_BINDING) : dir;
  try {
    real = realpathSync(link);
  } catch (e) {
    throw new MeshError(
      ErrorCodes.NotFound,
      `no identity binding at ${dir} (${(e as NodeJS.ErrnoException).code ?? errorMessage(e)}); the node's agent writes it as <part dir>/${IDENTITY_BINDING} once the mesh has a provider of the parts' identities (meshctl up declares one)`,
    );
  }
  const read = (key: string): string | undefined => {
    try {
      return readFileSync(join(real, key), "utf8");
    } catch {
      return undefined;
    }
  };
  const values = Object.fromEntries([...REQUIRED, "creds"].map((k) => [k, read(k)]));
  const missing = REQUIRED.filter((k) => !values[k]);
  if (missing.length)
    throw new MeshError(
      ErrorCodes.NotFound,
      `the identity binding at ${dir} lacks ${missing.join(", ")}; is it the directory named ${IDENTITY_BINDING} of a part?`,
    );
  const caFile = existsSync(join(real, "ca.crt")) ? { caFile: join(link, "ca.crt") } : {};
  return { ...values, ...caFile } as unknown as IdentityBinding;
}

/**
 * The part whose identity `nc` was made with, from its inbox prefix (which only that identity
 * may subscribe under); undefined for any other connection.
 */
export function partOfConnection(nc: NatsConnection): { module: string; node: string; part: string } | undefined {
  const prefix = (nc as { options?: { inboxPrefix?: string } }).options?.inboxPrefix ?? "";
  const [root, module, node, part, ...rest] = prefix.split(".");
  if (rest.length || root !== InboxRoots.part || !module || !node || !part) return undefined;
  return { module, node, part };
}

export interface ConnectWithIdentityOptions {
  /** The connection's name, as the server shows it; default `<module>/<part>@<node>`. */
  name?: string;
  /** Follow the identity's rotations (default true); without, the connection keeps the generation it started with until that is retired. */
  follow?: boolean;
  /** How long a reconnect with a rotated identity may take before the rotation is left waiting; default 10 s. */
  switchTimeoutMs?: number;
}

/** A connection made with a part's identity. */
export interface IdentityConnection {
  nc: NatsConnection;
  /** Who it is: the binding without its secret. */
  identity: Omit<IdentityBinding, "creds">;
  /** Stops following rotations (removing this holder's registration), then drains the connection. */
  close(): Promise<void>;
}

/**
 * Connects to the mesh's bus as the part whose identity binding is `dir`, with the binding's
 * `inboxPrefix` (the only reply subjects the identity may subscribe to), reconnecting for ever.
 * Throws MeshError `NotFound` for a missing binding, `ProviderMisconfigured` when the server
 * refuses the identity, `ProviderUnreachable` when it does not answer.
 */
export async function connectWithIdentity(dir: string, opts: ConnectWithIdentityOptions = {}): Promise<IdentityConnection> {
  const b = readIdentityBinding(dir);
  const { creds: initial, caFile, ...identity } = b;
  let creds = initial;
  const name = opts.name ?? `${b.module}/${b.part}@${b.node}`;
  // The authenticator asks `key` at every connect, so a reconnect uses the generation it gives then.
  const options = (key: () => string | undefined, extra: Partial<ConnectionOptions>): ConnectionOptions => ({
    servers: b.url.split(","),
    inboxPrefix: b.inboxPrefix,
    name,
    ...(caFile ? { tls: { caFile } } : {}),
    ...(initial !== undefined ? { authenticator: jwtAuthenticator(() => new TextEncoder().encode(key())) } : {}),
    ...extra,
  });
  let nc: NatsConnection;
  try {
    // Each reconnect waits 0.5 s and up to 1 s more at random, so the holders a server restart
    // cut off come back spread over 1.5 s rather than together (the client adds 100 ms at most by default).
    nc = await connect(options(() => creds, { maxReconnectAttempts: -1, reconnectTimeWait: 500, reconnectJitter: 1_000, ignoreAuthErrorAbort: true }));
  } catch (e) {
    const refused = /authorization violation|authentication/i.test(errorMessage(e));
    throw new MeshError(
      refused ? ErrorCodes.ProviderMisconfigured : ErrorCodes.ProviderUnreachable,
      refused
        ? `NATS at ${b.url} refused the identity of ${b.module}/${b.part} on ${b.node} (${errorMessage(e)}): its generation may have been retired; the agent writes the current one to ${dir}`
        : `cannot connect to NATS at ${b.url} (${errorMessage(e)})`,
      { cause: e, retryable: !refused },
    );
  }
  let holder: CredentialHolder | undefined;
  let stopped = false;
  const requirement = parseGrantId(b.grant)?.requirement;
  if (opts.follow !== false && initial !== undefined && requirement) {
    try {
      holder = await holdCredential(nc, { module: b.module, part: b.part, node: b.node, requirement });
    } catch (e) {
      // No connection left behind that nothing follows.
      await nc.close().catch(() => undefined);
      throw e;
    }
    const timeoutMs = opts.switchTimeoutMs ?? 10_000;
    /** Moves `nc` onto `next`: true once it is connected with it, false (still on the old one) when that did not work this time. */
    const switchTo = async (next: string): Promise<boolean> => {
      // Make before break: the new key connects on a connection of its own first, and stays
      // connected while this one moves over, so the part is on the new identity before its
      // connection on the old one closes; a key the server does not take yet breaks nothing.
      const bridging = connect(options(() => next, { name: `${name} (moving to its new identity)`, reconnect: false }));
      let bridge: NatsConnection;
      try {
        bridge = await withTimeout(bridging, timeoutMs);
      } catch {
        // One that connects after all is not left open.
        void bridging.then((c) => c.close()).catch(() => undefined);
        return false;
      }
      const previous = creds;
      creds = next;
      try {
        // The client closes the socket and connects again, asking the authenticator, so with the new key.
        await withTimeout(reconnected(nc), timeoutMs);
        await nc.flush();
        return true;
      } catch {
        // The new generation did not connect here: back to the one that works.
        creds = previous;
        if (!nc.isClosed()) await nc.reconnect().catch(() => undefined);
        return false;
      } finally {
        await bridge.close().catch(() => undefined);
      }
    };
    void (async () => {
      for await (const held of holder!) {
        const next = held.values.creds;
        if (!next || next === creds) {
          await held.confirm();
          continue;
        }
        // Tried until it takes: the rotation waits for this holder's confirmation (meshctl
        // status shows it), and nothing else would try again. A server refuses or resets
        // connections for a moment while it reloads (the mesh reloads its own for each new
        // certificate), or while it fails over; a key not yet pushed to every server of a
        // cluster is taken a moment later. A newer generation taken meanwhile is moved to instead.
        let switched = false;
        for (let attempt = 1; !switched && !nc.isClosed() && !stopped && holder!.generation === held.generation; attempt++) {
          switched = await switchTo(next);
          if (!switched) await sleep(backoffMs(attempt, SWITCH_BACKOFF));
        }
        if (switched) await held.confirm();
      }
    })().catch(() => undefined);
  }
  return {
    nc,
    identity,
    async close() {
      stopped = true;
      await holder?.stop();
      if (!nc.isClosed()) await nc.drain();
    },
  };
}

/** The waits between attempts to move onto a rotated identity: from 250 ms, doubling, at most 5 s. */
const SWITCH_BACKOFF = { firstMs: 250, maxMs: 5_000 };

/** Forces a reconnect and resolves once the client is connected again. */
async function reconnected(nc: NatsConnection): Promise<void> {
  const events = nc.status();
  await nc.reconnect();
  for await (const s of events) if (s.type === "reconnect") return;
  throw new Error("the connection closed");
}

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([p, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms)))]).finally(() =>
    clearTimeout(timer),
  );
}
