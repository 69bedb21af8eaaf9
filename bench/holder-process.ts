/**
 * A process of the rotation benchmark's holders, forked by rotation.bench.ts so the process
 * under measurement holds only the services: it opens `count` NATS connections, runs one SDK
 * holder (`holdCredential`) and one plain floor responder on each, and answers its parent over
 * IPC. Each request is `{ id, op, ... }`, each reply `{ id, result }` or `{ id, error }`:
 * - `start` `{ url, module, requirement, first, count, floorSubject, pgEndpoint? }`: connects,
 *   holds, subscribes the floor responders; with `pgEndpoint` each holder logs in with the new
 *   values before it confirms (at most {@link LOGINS_AT_ONCE} logins at once in this process);
 * - `generation`: the lowest generation any of its holders is on;
 * - `logins` `{ values, n }`: the bare baseline, `n` such logins at once (same limit), in ms;
 * - `profile`: starts a CPU profile of this process; called again, stops it and returns it (JSON);
 * - `stop`: stops the holders, closes the connections, and the process exits.
 */
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { Kinds } from "@mesh/shared";
import { createAdapter, type ProviderAdapter } from "@mesh/providers";
import { holdCredential, type CredentialHolder } from "@mesh/client";
import { startProfile } from "./profile.js";

/** A SCRAM login costs this machine about 40 ms of CPU: 100 at once pass the adapter's 3 s login timeout. */
const LOGINS_AT_ONCE = 40;

interface Start {
  url: string;
  module: string;
  requirement: string;
  /** Holder instances are named `h<first>` … `h<first + count - 1>`. */
  first: number;
  count: number;
  floorSubject: string;
  /** A Provider document's `endpoint` (`postgres://host:port`). */
  pgEndpoint?: string;
}

let conns: NatsConnection[] = [];
let holders: CredentialHolder[] = [];
let generations: number[] = [];
let adapter: ProviderAdapter | undefined;
let stopProfile: (() => Promise<string>) | undefined;

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

async function start(s: Start): Promise<void> {
  if (s.pgEndpoint) adapter = createAdapter(Kinds.PostgresDatabase, { name: "pg-bench", node: "n1", endpoint: s.pgEndpoint });
  for (let i = 0; i < s.count; i += 200) {
    conns.push(...(await Promise.all(Array.from({ length: Math.min(200, s.count - i) }, () => connect({ servers: s.url.split(","), maxReconnectAttempts: -1 })))));
  }
  generations = new Array(s.count).fill(0);
  for (let i = 0; i < s.count; i += 200) {
    holders.push(
      ...(await Promise.all(
        conns.slice(i, i + 200).map((c, j) =>
          holdCredential(c, { module: s.module, part: "app", requirement: s.requirement, node: "n1", instance: `h${s.first + i + j}`, fetchTimeoutMs: 20_000 }),
        ),
      )),
    );
  }
  holders.forEach((h, i) =>
    void (async () => {
      for await (const u of h) {
        if (u.rotation && adapter) await login(u.values);
        generations[i] = u.generation;
        if (u.rotation) await u.confirm();
      }
    })(),
  );
  for (const c of conns) c.subscribe(s.floorSubject, { callback: (_e, m) => void m.respond("ok") });
  await Promise.all(conns.map((c) => c.flush()));
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
    case "profile": {
      if (!stopProfile) {
        stopProfile = await startProfile();
        return undefined;
      }
      const p = await stopProfile();
      stopProfile = undefined;
      return p;
    }
    case "stop":
      await Promise.all(holders.map((h) => h.stop()));
      await Promise.all(conns.map((c) => c.close()));
      await adapter?.close();
      holders = [];
      conns = [];
      return undefined;
    default:
      throw new Error(`unknown op ${op}`);
  }
}

process.on("message", (m: { id: number; op: string } & Record<string, unknown>) => {
  void handle(m.op, m).then(
    (result) => process.send!({ id: m.id, result }, () => m.op === "stop" && process.exit(0)),
    (e: unknown) => process.send!({ id: m.id, error: e instanceof Error ? e.message : String(e) }),
  );
});
// The parent gone (it failed or was stopped): nothing to hold for.
process.on("disconnect", () => process.exit(1));
