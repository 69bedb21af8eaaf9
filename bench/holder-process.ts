/**
 * A process of the rotation benchmarks' holders, forked by rotation.bench.ts and
 * rotation-operator.bench.ts so the process under measurement holds only the services: it opens
 * `count` NATS connections, runs one SDK holder (`holdCredential`) and one plain floor responder
 * on each, and answers its parent over IPC (bench-child.ts):
 * - `start` `{ url, module, part?, node?, requirement, first, count, floorSubject, bare?, identityDir?, pgEndpoint? }`:
 *   connects (with `identityDir`, as the part whose identity binding that is, with its inbox
 *   prefix: `connectWithIdentity`), holds, subscribes the floor responders; with `bare`, also
 *   pulls from and acknowledges every message of consumer `<consumerPrefix><first + i>` of the
 *   bare JetStream floor's stream on connection i, pulling as the SDK pulls from its own (one-pull.ts; no mesh code:
 *   rotation-rounds.ts's BareFloor); with `pgEndpoint`
 *   each holder logs in with the new values before it confirms (at most {@link LOGINS_AT_ONCE}
 *   logins at once in this process); answers, with `identityDir`, `{ refused }`: whether the
 *   server refused a connection a publish outside the part's permissions;
 * - `generation`: the lowest generation any of its holders is on;
 * - `logins` `{ values, n }`: the bare baseline, `n` such logins at once (same limit), in ms;
 * - `profile`: starts a CPU profile of this process; called again, stops it and returns it (JSON);
 * - `stop`: stops the holders, closes the connections, and the process exits.
 */
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import { Kinds } from "@mesh/shared";
import { holderPullExpiresMs, OnePull } from "@mesh/shared/runtime";
import { createAdapter, type ProviderAdapter } from "@mesh/providers";
import { connectWithIdentity, holdCredential, type CredentialHolder } from "@mesh/client";
import { toggleProfile } from "./profile.js";
import { serveParent } from "./bench-child.js";
import { refusesOutside } from "./refusal.js";

/** A SCRAM login costs this machine about 40 ms of CPU: 100 at once pass the adapter's 3 s login timeout. */
const LOGINS_AT_ONCE = 40;

interface Start {
  url: string;
  module: string;
  /** The part and node the holders are instances of; default `app` on `n1`. */
  part?: string;
  node?: string;
  requirement: string;
  /** Holder instances are named `h<first>` … `h<first + count - 1>`. */
  first: number;
  count: number;
  floorSubject: string;
  /** The bare JetStream floor's stream and the prefix of its consumers' names (rotation-rounds.ts's BareFloor). */
  bare?: { stream: string; consumerPrefix: string };
  /** The part's identity binding (its `identity` directory), to connect as the part instead of without credentials. */
  identityDir?: string;
  /** A Provider document's `endpoint` (`postgres://host:port`). */
  pgEndpoint?: string;
}

let conns: NatsConnection[] = [];
/** Closes each connection: a drain for one made with an identity. */
let closers: Array<() => Promise<void>> = [];
let holders: CredentialHolder[] = [];
/** The bare floor's pullers, closed at stop. */
const barePullers: OnePull[] = [];
let generations: number[] = [];
let adapter: ProviderAdapter | undefined;

let active = 0;
const waiting: Array<() => void> = [];
async function login(values: Record<string, string>): Promise<void> {
  while (active >= LOGINS_AT_ONCE) await new Promise<void>((r) => waiting.push(r));
  active++;
  try {
    const r = await adapter!.login({ bindings: values });
    if (!r.ok) throw new Error(r.message);
  } finally {
    active--;
    waiting.shift()?.();
  }
}

async function start(s: Start): Promise<{ refused?: boolean }> {
  if (s.pgEndpoint) adapter = createAdapter(Kinds.PostgresDatabase, { name: "pg-bench", node: "n1", endpoint: s.pgEndpoint });
  const open = async (): Promise<NatsConnection> => {
    if (!s.identityDir) {
      const nc = await connect({ servers: s.url.split(","), maxReconnectAttempts: -1 });
      closers.push(() => nc.close());
      return nc;
    }
    // Not following the identity's own rotations: each connection holds the one grant measured, as without an identity.
    const c = await connectWithIdentity(s.identityDir, { follow: false });
    closers.push(() => c.close());
    return c.nc;
  };
  // With an identity each handshake signs the server's nonce and the server checks a JWT: 100 at
  // once on a busy machine outlasted the server's auth timeout (2 s), so fewer at a time.
  const batch = s.identityDir ? 25 : 200;
  for (let i = 0; i < s.count; i += batch) {
    conns.push(...(await Promise.all(Array.from({ length: Math.min(batch, s.count - i) }, open))));
  }
  generations = new Array(s.count).fill(0);
  for (let i = 0; i < s.count; i += 200) {
    holders.push(
      ...(await Promise.all(
        conns.slice(i, i + 200).map((c, j) =>
          holdCredential(c, {
            module: s.module,
            part: s.part ?? "app",
            requirement: s.requirement,
            node: s.node ?? "n1",
            instance: `h${s.first + i + j}`,
            fetchTimeoutMs: 20_000,
          }),
        ),
      )),
    );
  }
  holders.forEach(
    (h, i) =>
      void (async () => {
        for await (const u of h) {
          if (u.rotation && adapter) await login(u.values);
          generations[i] = u.generation;
          if (u.rotation) await u.confirm();
        }
      })(),
  );
  if (s.bare) {
    const { stream, consumerPrefix } = s.bare;
    // The SDK's own pull (hold-credential.ts, one-pull.ts): the consumer looked up once, then one
    // message per pull on one inbox, each acknowledged, the next pull leaving with the ack.
    await Promise.all(conns.map((c, i) => jetstream(c).consumers.get(stream, `${consumerPrefix}${s.first + i}`)));
    conns.forEach((c, i) => {
      const puller = new OnePull(c, stream, `${consumerPrefix}${s.first + i}`, (m) => m.ack());
      barePullers.push(puller);
      void (async () => {
        // A pull unanswered or the consumer gone: run again (ended at stop).
        // Each pull as long as the SDK's (its consumer is not new to it: settled from the start).
        while ((await puller.run((afterMessage) => holderPullExpiresMs(Date.now(), 0, afterMessage))) !== "closed") await new Promise((r) => setTimeout(r, 50));
      })();
    });
  }
  // The floor's message names the subject to answer on (rotation-rounds.ts's Floor).
  for (const c of conns) c.subscribe(s.floorSubject, { callback: (_e, m) => c.publish(m.string(), "ok") });
  await Promise.all(conns.map((c) => c.flush()));
  // Made with an identity: whether the server holds the connections to its permissions.
  return s.identityDir && conns[0] ? { refused: await refusesOutside(conns[0]) } : {};
}

async function handle(op: string, body: Record<string, unknown>): Promise<unknown> {
  switch (op) {
    case "start":
      return start(body as unknown as Start);
    case "generation":
      return generations.length ? Math.min(...generations) : 0;
    case "logins": {
      const values = body.values as Record<string, string>;
      const t0 = performance.now();
      await Promise.all(Array.from({ length: body.n as number }, () => login(values)));
      return performance.now() - t0;
    }
    case "profile":
      return toggleProfile();
    case "stop":
      await Promise.all(holders.map((h) => h.stop()));
      for (const p of barePullers.splice(0)) p.close();
      await Promise.all(closers.map((close) => close()));
      await adapter?.close();
      holders = [];
      conns = [];
      closers = [];
      return undefined;
    default:
      throw new Error(`unknown op ${op}`);
  }
}

serveParent(handle);
