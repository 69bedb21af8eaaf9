/**
 * What every cluster test starts from and checks after each fault: the mesh bootstrapped on a
 * three-server cluster whose operator is the mesh (harness/nats-cluster.ts), one agent per
 * node, every other service twice (meshctl's instance and a second one,
 * harness/service-instances.ts), holders that log in with what their agent wrote every 50 ms,
 * and the invariants every fault must keep (no generation lost, nothing retired early), read from the store.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { connect, credsAuthenticator, type NatsConnection } from "@nats-io/transport-node";
import { Grant, ModuleStatus, Rotation, keys, readHolderAcks, subjects } from "@mesh/shared";
import { connectNats, natsIdentity, openStore, readJson, retryJetStreamGap, type Store } from "@mesh/shared/runtime";
import { CredentialStore, storeKeyRing } from "@mesh/providers";
import { startOperatorCluster, type OperatorCluster } from "../harness/nats-cluster.js";
import { startBootstrappedMesh, type BootstrappedMesh } from "../harness/bootstrapped-mesh.js";
import { startSecondInstances, type SecondInstances } from "../harness/service-instances.js";
import { waitFor } from "../harness/wait.js";

export const NODES = ["node-a", "node-b"] as const;
/** The services that run twice; agents run once per node. */
export const TWICE = ["resolver", "provisioner", "verifier", "rotator"] as const;

export interface MeshOnCluster {
  cluster: OperatorCluster;
  mesh: BootstrappedMesh;
  second: SecondInstances;
  /** The admin's connection, to every member, reconnecting. */
  nc: NatsConnection;
  store: Store;
  stop(): Promise<void>;
}

/** With `meshctl`, the meshctl that bootstraps the mesh and runs its services (default this tree's). */
export async function startMeshOnCluster(opts: { meshctl?: string } = {}): Promise<MeshOnCluster> {
  const cluster = await startOperatorCluster();
  let mesh: BootstrappedMesh | undefined;
  let second: SecondInstances | undefined;
  try {
    // No MESH_REPLICAS: the services see a cluster of three and make every bucket and stream R3.
    mesh = await startBootstrappedMesh({
      nodes: [...NODES],
      on: { cwd: cluster.cwd, url: cluster.url, monitorUrls: cluster.members.map((m) => m.monitorUrl) },
      env: { MESH_REPLICAS: "" },
      ...(opts.meshctl ? { meshctl: opts.meshctl } : {}),
    });
    second = await startSecondInstances(mesh, TWICE);
    const booted = mesh;
    await waitFor(
      "every service connected twice, every agent once",
      async () => {
        const names = (await booted.connections()).map((c) => c.name);
        return TWICE.every((x) => names.filter((n) => n === `mesh-${x}`).length === 2) && names.filter((n) => n === "mesh-agent").length === NODES.length;
      },
      90_000,
      250,
    );
    const nc = await connectNats(cluster.url, { ...natsIdentity({ MESH_NATS_CREDENTIALS: mesh.adminCredsFile }), name: "cluster-test" });
    const store = await openStore(nc);
    const m = mesh;
    const s = second;
    return {
      cluster,
      mesh,
      second,
      nc,
      store,
      async stop() {
        await nc.close().catch(() => {});
        await s.stop();
        await m.stop();
        await cluster.stop();
      },
    };
  } catch (e) {
    await second?.stop();
    await mesh?.stop();
    await cluster.stop();
    throw e;
  }
}

/** {@link startMeshOnCluster}, with module `app` ({@link busModule}) applied and Ready: where the faults start from. */
export async function startMeshWithApp(opts: { meshctl?: string } = {}): Promise<MeshOnCluster> {
  const t = await startMeshOnCluster(opts);
  try {
    await applyDocs(t.nc, [busModule("app")]);
    await allReady(t.store, ["app"], 120_000);
  } catch (e) {
    await t.stop();
    throw e;
  }
  return t;
}

/** A module of two parts, one per node, each holding the broker identity `bus` (a nats.user grant of the mesh's own bus). */
export const busModule = (name: string) => ({
  kind: "Module",
  name,
  parts: [
    { name: "api", node: "node-a" },
    { name: "worker", node: "node-b" },
  ],
  requires: [{ name: "bus", kind: "nats.user" }],
});

/** Where the agent of `node` writes `module`'s grant `requirement` for `part`. */
export const bindingDir = (mesh: BootstrappedMesh, node: string, module: string, part: string, requirement: string) =>
  join(mesh.cwd, ".mesh/bindings", node, module, part, requirement);

export interface HolderQueries {
  /** Logins made, and the ones NATS refused (with when and as whom). */
  made: number;
  refused: Array<{ holder: string; at: string; user: string; error: string }>;
  /** Logins that did not reach a server (a member being killed); not refusals. */
  unreachable: number;
  stop(): Promise<void>;
}

/**
 * Holders that query every 50 ms: each logs in to the cluster with the `creds` its agent
 * wrote last (read again for every login, as a process that reloads its binding does). A
 * refusal (authorization violation, revoked) is a failed login; a login that reached no
 * server is counted apart, as the network's, not the mesh's.
 */
export function queryEvery50ms(cluster: OperatorCluster, holders: Array<{ holder: string; dir: string }>): HolderQueries {
  let stopped = false;
  const q: HolderQueries = { made: 0, refused: [], unreachable: 0, stop: async () => void 0 };
  const loops = holders.map(async ({ holder, dir }) => {
    while (!stopped) {
      const started = Date.now();
      let creds = "";
      try {
        creds = readFileSync(join(dir, "creds"), "utf8");
      } catch {
        // Not written yet.
      }
      if (creds) {
        const user =
          /"name":"([^"]+)"/.exec(
            Buffer.from(
              creds
                .split("\n")
                .find((l) => l.startsWith("ey"))
                ?.split(".")[1] ?? "",
              "base64url",
            ).toString(),
          )?.[1] ?? "?";
        try {
          // A login stuck on a server being killed counts as unreachable, never as a hang.
          await loginOnce(
            cluster.members.filter((m) => m.up).map((m) => m.url),
            creds,
            2_000,
          );
          q.made++;
        } catch (e) {
          const error = String(e);
          if (/authorization violation|authentication (revoked|expired)|user authentication/i.test(error))
            q.refused.push({ holder, at: new Date().toISOString(), user, error });
          else q.unreachable++;
        }
      }
      await new Promise((r) => setTimeout(r, Math.max(0, 50 - (Date.now() - started))));
    }
  });
  q.stop = async () => {
    stopped = true;
    await Promise.all(loops);
  };
  return q;
}

/** Every module in `modules` is Ready (waited for up to `timeoutMs`). */
export async function allReady(store: Store, modules: string[], timeoutMs = 30_000): Promise<void> {
  let seen = "nothing read yet";
  await waitFor(
    () => `modules ${modules.join(", ")} Ready (last seen: ${seen})`,
    async () => {
      // All at once: one read that meets a leader election must not hold up the others.
      const states = await Promise.all(modules.map((m) => readJson(store.kv.modules, m, ModuleStatus).then((r) => r?.value)));
      seen = states.map((s, i) => `${modules[i]} ${s ? `${s.state}: ${s.message}` : "no status"}`).join("; ");
      return states.every((s) => s?.state === "Ready") || undefined;
    },
    timeoutMs,
    100,
  );
}

/**
 * The store's invariants for grant `module`/`requirement`, as a list of what is wrong (empty
 * when all hold): its generations, as its history recorded them, rise one at a time; every
 * generation still stored has a value of its own; every rotation id names one rotation; and
 * every committed rotation committed after each of its holders confirmed.
 */
export async function grantInvariants(store: Store, cluster: OperatorCluster, module: string, requirement: string): Promise<string[]> {
  // Listing a key's history is an ordered consumer; one that met a leader change may never end
  // on 2.9.10 (seen once here), so each try is bounded and the read made again.
  for (let attempt = 1; ; attempt++) {
    let timer: NodeJS.Timeout | undefined;
    const bounded = new Promise<never>(
      (_, reject) => (timer = setTimeout(() => reject(new Error(`reading the history of ${module}/${requirement} did not end within 20 s`)), 20_000)),
    );
    try {
      return await Promise.race([invariantsOnce(store, cluster, module, requirement), bounded]);
    } catch (e) {
      if (attempt >= 3) throw e;
    } finally {
      clearTimeout(timer);
    }
  }
}

async function invariantsOnce(store: Store, cluster: OperatorCluster, module: string, requirement: string): Promise<string[]> {
  const wrong: string[] = [];
  const key = keys.grant(module, requirement);
  const generations: number[] = [];
  for await (const e of await retryJetStreamGap(() => store.kv.grants.history({ key }))) {
    if (e.operation !== "PUT" || e.length === 0) continue;
    const g = Grant.safeParse(e.json());
    if (g.success && g.data.generation > 0 && generations.at(-1) !== g.data.generation) generations.push(g.data.generation);
  }
  for (let i = 1; i < generations.length; i++) {
    if (generations[i] !== generations[i - 1]! + 1) wrong.push(`${key}: generations ${generations.join(", ")} are not consecutive`);
  }
  const creds = new CredentialStore(store.kv.credentials, storeKeyRing(store, cluster.masterKey));
  const values = new Map<string, number>();
  for (const g of await creds.generations(module, requirement)) {
    const c = await creds.read(module, requirement, g);
    const v = JSON.stringify(c?.secret);
    if (values.has(v)) wrong.push(`${key}: generations ${values.get(v)} and ${g} hold the same value`);
    values.set(v, g);
  }
  const byId = new Map<string, Rotation>();
  const requested = new Map<string, Set<string>>();
  for await (const e of await retryJetStreamGap(() => store.kv.rotations.history({ key }))) {
    if (e.operation !== "PUT") continue;
    const r = Rotation.safeParse(e.json());
    if (!r.success) continue;
    byId.set(r.data.id, r.data);
    requested.set(r.data.id, (requested.get(r.data.id) ?? new Set()).add(`${r.data.requestedAt} ${r.data.from}->${r.data.to}`));
  }
  for (const [id, set] of requested) if (set.size > 1) wrong.push(`rotation id ${id} names ${set.size} rotations: ${[...set].join("; ")}`);
  for (const r of byId.values()) {
    if (r.state !== "Committed" || !r.committedAt) continue;
    const committedMs = Date.parse(r.committedAt) - Date.parse(r.requestedAt);
    for (const [holder, p] of Object.entries(r.holders)) {
      if (p.e !== undefined) continue;
      if (p.c === undefined || p.c > committedMs)
        wrong.push(`rotation ${r.id} committed at +${committedMs} ms, before holder ${holder} confirmed (${p.c ?? "never"})`);
    }
  }
  return wrong;
}

/** A read of the test's own, tried again while a server that just went away leaves it unanswered. */
const read = <T>(what: string, f: () => Promise<T>) => waitFor(what, () => f().then((v) => ({ v })), 30_000, 200).then((r) => r.v);

/** The generation grant `module`/`requirement` is on now. */
export async function generationOf(store: Store, module: string, requirement: string): Promise<number> {
  return (await read(`grant ${module}/${requirement}`, () => readJson(store.kv.grants, keys.grant(module, requirement), Grant)))?.value.generation ?? 0;
}

/** The rotation of grant `module`/`requirement` as the store has it now. */
export async function rotationOf(store: Store, module: string, requirement: string): Promise<Rotation | undefined> {
  return (await read(`rotation of ${module}/${requirement}`, () => readJson(store.kv.rotations, keys.grant(module, requirement), Rotation)))?.value;
}

/**
 * Waits until the rotation of `module`/`requirement` from generation `from` has been broadcast
 * and waits for holder `missing`, `confirmed` having acknowledged it (who confirmed is
 * JetStream's while it runs: each holder's consumer's ack floor); returns its record.
 */
export async function rotationWaitingFor(
  store: Store,
  module: string,
  requirement: string,
  from: number,
  holders: { confirmed: string; missing: string },
): Promise<Rotation> {
  return waitFor(
    `the rotation to wait for ${holders.missing}, ${holders.confirmed} confirmed`,
    async () => {
      const r = await rotationOf(store, module, requirement);
      if (!r || r.to !== from + 1 || r.broadcasts.length === 0) return undefined;
      const acked = new Set((await readHolderAcks(store.jsm, r)).filter((h) => h.acked).map((h) => h.holder));
      return acked.has(holders.confirmed) && !acked.has(holders.missing) ? r : undefined;
    },
    60_000,
  );
}

/** Prints a fault's time to resume where the test's output shows it. */
export function printResume(what: string, ms: number): void {
  console.log(`[cluster] ${what}: the mesh resumed ${(ms / 1000).toFixed(1)} s after the fault ended`);
}

/** Applies `documents` as an operator's client does: sent again while no resolver answers (one restarting) or the answer says to. */
export async function applyDocs(nc: NatsConnection, documents: unknown[], timeoutMs = 60_000): Promise<void> {
  await waitFor(
    "the resolver to accept the documents",
    async () => {
      const m = await nc.request(subjects.apply, JSON.stringify({ documents, source: "cluster test" }), { timeout: 15_000 }).catch((e: unknown) => {
        if (/no responders|timeout/i.test(String(e))) return undefined;
        throw e;
      });
      const body = m?.json() as { ok: boolean; error?: { retryable?: boolean } } | undefined;
      if (body && !body.ok && !body.error?.retryable) throw new Error(`apply refused: ${JSON.stringify(body)}`);
      return body?.ok ? true : undefined;
    },
    timeoutMs,
    250,
  );
}

/**
 * Whether server `url` (that one alone) accepts the identity of `creds` now: false only when
 * it refuses it; a connection that failed otherwise is tried again, a few times.
 */
export async function logsInAt(url: string, creds: string): Promise<boolean> {
  for (let attempt = 1; ; attempt++) {
    try {
      await loginOnce(url, creds, 3_000);
      return true;
    } catch (e) {
      if (/authorization violation|authentication (revoked|expired)/i.test(String(e))) return false;
      if (attempt >= 5) throw e;
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}

/**
 * One login with `creds` at `servers`: connect (within `connectMs`), a round trip, close. It fails
 * after 5 s rather than hang: a round trip to a server killed or restarting under it may never
 * be answered (seen once: a server just restarted, a flush that never ended, the test held to its
 * timeout with nothing said).
 */
async function loginOnce(servers: string | string[], creds: string, connectMs: number): Promise<void> {
  const login = (async () => {
    const c = await connect({ servers, reconnect: false, timeout: connectMs, authenticator: credsAuthenticator(new TextEncoder().encode(creds)) });
    await c.flush();
    await c.close();
  })();
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error("the login did not finish within 5 s")), 5_000)));
  try {
    await Promise.race([login, late]);
  } finally {
    clearTimeout(timer);
    login.catch(() => undefined);
  }
}
