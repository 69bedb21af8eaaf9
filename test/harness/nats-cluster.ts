/**
 * A test's own three-server NATS cluster (Debian's nats-server) on loopback ports, with
 * JetStream, in the same authenticated mode as a single server of the mesh: the mesh is the
 * operator, and every member has the operator JWT, the system account and a full resolver
 * (its own JWT directory), made by the same code as `meshctl nats-config --cluster-file`
 * (@mesh/providers' operatorConfig). The operator's keys and the master key are written where
 * `meshctl bootstrap` run from `cwd` finds them (`.mesh/nats-operator/`, `.mesh/master.key`),
 * so a bootstrap given the cluster's URLs uses it and starts no server of its own.
 *
 * With `tls`, every member's configuration is what `meshctl nats-config --tls-name localhost
 * --tls-name 127.0.0.1 --cluster-file … --server-name …` prints: clients and routes over TLS with
 * a certificate of the mesh's authority (`.mesh/mesh-ca/`), each member verifying the others'.
 *
 * Faults are real: `kill()` is SIGKILL of that member's own PID, `stop()` is SIGTERM, and
 * `restart()` starts it again on the same ports with the same store and JWT directory.
 * Never touches the shared server on 4222.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect, credsAuthenticator, type NatsConnection } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { parseMasterKey, type MasterKey } from "@mesh/shared";
import { caFiles, ensureOperator, operatorConfig, operatorFiles, type OperatorFiles, type OperatorPublic } from "@mesh/providers";
import { natsConfigText } from "../../packages/cli/src/bootstrap.js";
import { startNatsServer, type NatsServer } from "./nats-server.js";
import { freePort } from "./ports.js";
import { waitFor } from "./wait.js";

export interface ClusterMember {
  /** `server_name`: mesh-n1, mesh-n2, mesh-n3. */
  name: string;
  url: string;
  monitorUrl: string;
  server: NatsServer;
  /** Whether the harness has it running now. */
  up: boolean;
  /** SIGKILL, as a crash (the store is kept). */
  kill(): Promise<void>;
  /** SIGTERM, as an orderly shutdown (the store is kept). */
  stop(): Promise<void>;
  /** Starts it again on the same ports, store and JWT directory. */
  restart(): Promise<void>;
}

export interface OperatorCluster {
  /** The directory bootstrap runs from: `.mesh/` there holds the operator's keys and the master key. */
  cwd: string;
  files: OperatorFiles;
  operator: OperatorPublic;
  masterKey: MasterKey;
  masterKeyFile: string;
  members: ClusterMember[];
  /** Every member's client URL, comma-separated: what NATS_URL takes. */
  url: string;
  adminCreds: string;
  /** The bundle clients verify the members against, for a cluster with TLS. */
  caFile?: string;
  member(name: string): ClusterMember;
  /** The member that leads the JetStream meta group now (asked of a running member's /jsz). */
  metaLeader(): Promise<ClusterMember>;
  /** The member that leads stream `stream` now (asked with the admin's identity). */
  streamLeader(nc: NatsConnection, stream: string): Promise<ClusterMember>;
  /**
   * Waits until every running member says it is healthy: current with the meta leader, and every
   * replica of every stream and consumer it holds current (`/healthz`). Only for a cluster no
   * fault has touched yet: on 2.9.10, a file-backed consumer replica whose server was killed
   * while it led the consumer may come back stuck catching up (its log ends at index 0 in term 1,
   * the leader's first entry is [0:0]; they go round that at once, forever), and stays not
   * current until the consumer's leader changes (a leader step-down healed it within 5 s here;
   * its acks did not). The other two replicas are a majority, so the consumer works meanwhile.
   */
  waitHealthy(timeoutMs?: number): Promise<void>;
  /**
   * Waits until every running member is current with a meta leader (`/healthz?js-server-only=true`):
   * what a test needs before it asks the cluster which member leads what. Replicas still catching
   * up are not waited for.
   */
  waitMeta(timeoutMs?: number): Promise<void>;
  /** Connects as the admin (or `creds`) to every member's URL, with reconnects unless told not to. */
  connect(creds?: string, opts?: { reconnect?: boolean; name?: string }): Promise<NatsConnection>;
  /** Stops every member; removes the directory unless MESH_TEST_KEEP_DIRS=1. */
  stop(opts?: { keepDir?: boolean }): Promise<void>;
}

const getJson = async <T>(url: string): Promise<T> => {
  const r = await fetch(url, { signal: AbortSignal.timeout(2_000) });
  return (await r.json()) as T;
};

/** Starts a cluster of `size` (default 3) members whose operator is the mesh; resolves once it has a meta leader. */
export async function startOperatorCluster(opts: { size?: number; cwd?: string; tls?: boolean } = {}): Promise<OperatorCluster> {
  const size = opts.size ?? 3;
  const cwd = opts.cwd ?? mkdtempSync(join(tmpdir(), "mesh-cluster-"));
  const stateDir = join(cwd, ".mesh");
  mkdirSync(stateDir, { recursive: true, mode: 0o700 });
  const masterKeyFile = join(stateDir, "master.key");
  const hex = randomBytes(32).toString("hex");
  writeFileSync(masterKeyFile, `${hex}\n`, { mode: 0o600 });
  const masterKey = parseMasterKey(hex);
  const files = operatorFiles(join(stateDir, "nats-operator"));
  const operator = await ensureOperator(files, masterKey);
  const ca = caFiles(join(stateDir, "mesh-ca"));

  const ports = await Promise.all(Array.from({ length: size }, async () => ({ client: await freePort(), cluster: await freePort() })));
  const routes = ports.map((p) => `    nats-route://127.0.0.1:${p.cluster}`).join("\n");
  const members: ClusterMember[] = [];
  for (const [i, p] of ports.entries()) {
    const name = `mesh-n${i + 1}`;
    const dir = join(cwd, "nats", name);
    const storeDir = join(dir, "store");
    const resolverDir = join(dir, "resolver");
    mkdirSync(storeDir, { recursive: true });
    mkdirSync(resolverDir, { recursive: true });
    const configFile = join(dir, "server.conf");
    // Every member lists every route, itself included (harmless), as deploy/nats/cluster does.
    const cluster = `cluster {\n  name: mesh\n  listen: "127.0.0.1:${p.cluster}"\n  routes: [\n${routes}\n  ]\n}`;
    // Each member logs to its own file beside its store (kept with MESH_TEST_KEEP_DIRS=1); MESH_TEST_NATS_DEBUG=1 adds the Raft groups' debug lines.
    const logging = `\nlog_file: "${join(dir, "server.log")}"\n${process.env.MESH_TEST_NATS_DEBUG === "1" ? "debug: true\n" : ""}`;
    let config: string;
    if (opts.tls) {
      const clusterFile = join(dir, "cluster.conf");
      writeFileSync(clusterFile, cluster);
      config = await natsConfigText({
        files,
        masterKey,
        listen: `127.0.0.1:${p.client}`,
        storeDir,
        resolverDir,
        clusterFile,
        serverName: name,
        tls: { names: ["localhost", "127.0.0.1"], lifetimeMs: 86_400_000, ca },
      });
    } else {
      config = operatorConfig(files, operator, { host: "127.0.0.1", port: p.client, storeDir, resolverDir, serverName: name, cluster });
    }
    writeFileSync(configFile, config + logging, { mode: 0o600 });
    // startNatsServer waits for the client port only: a member starts alone, then finds the others.
    const server = await startNatsServer({ port: p.client, configFile, storeDir });
    const m: ClusterMember = {
      name,
      url: server.url,
      monitorUrl: `http://127.0.0.1:${server.monitorPort}`,
      server,
      up: true,
      async kill() {
        m.up = false;
        await server.kill();
      },
      async stop() {
        m.up = false;
        await server.stop({ keepStore: true });
      },
      async restart() {
        await server.restart();
        m.up = true;
      },
    };
    members.push(m);
  }
  const adminCreds = readFileSync(files.adminCredsFile, "utf8");
  const tls = opts.tls ? { tls: { caFile: ca.certFile } } : {};
  const url = members.map((m) => m.url).join(",");
  const byName = (name: string) => {
    const m = members.find((x) => x.name === name);
    if (!m) throw new Error(`no cluster member named ${JSON.stringify(name)} (members: ${members.map((x) => x.name).join(", ")})`);
    return m;
  };

  // A member that is not healthy says why; the last reason is in the timeout's message.
  const healthy = (what: string, query: string, timeoutMs: number) =>
    waitFor(
      what,
      async () => {
        for (const m of members.filter((x) => x.up)) {
          const r = await fetch(`${m.monitorUrl}/healthz${query}`, { signal: AbortSignal.timeout(2_000) });
          if (!r.ok) throw new Error(`${m.name}: ${await r.text()}`);
          const j = await getJson<{ meta_cluster?: { leader?: string } }>(`${m.monitorUrl}/jsz`);
          if (!j.meta_cluster?.leader) throw new Error(`${m.name}: no meta leader`);
        }
        return true;
      },
      timeoutMs,
      200,
    ).then(() => undefined);

  const c: OperatorCluster = {
    cwd,
    files,
    operator,
    masterKey,
    masterKeyFile,
    members,
    url,
    adminCreds,
    ...(opts.tls ? { caFile: ca.certFile } : {}),
    member: byName,
    metaLeader: () => metaLeaderAmong(members, (m) => m.monitorUrl, byName),
    async streamLeader(nc, stream) {
      const jsm = await jetstreamManager(nc, { timeout: 3_000 });
      return waitFor(
        `stream ${stream} to have a leader`,
        async () => {
          const leader = (await jsm.streams.info(stream)).cluster?.leader;
          return leader ? byName(leader) : undefined;
        },
        30_000,
        200,
      );
    },
    waitHealthy: (timeoutMs = 60_000) => healthy("every running member healthy, every replica current", "", timeoutMs),
    waitMeta: (timeoutMs = 60_000) => healthy("every running member current with a meta leader", "?js-server-only=true", timeoutMs),
    connect: (creds = adminCreds, o = {}) =>
      connect({
        servers: members.map((m) => m.url),
        reconnect: o.reconnect ?? true,
        maxReconnectAttempts: -1,
        reconnectTimeWait: 250,
        timeout: 3_000,
        name: o.name ?? "cluster-test",
        authenticator: credsAuthenticator(new TextEncoder().encode(creds)),
        ...tls,
      }),
    async stop(o = {}) {
      await Promise.all(members.map((m) => m.server.stop({ keepStore: true }).catch(() => {})));
      if (o.keepDir || process.env.MESH_TEST_KEEP_DIRS === "1") console.error(`kept ${cwd} (MESH_TEST_KEEP_DIRS=1)`);
      else rmSync(cwd, { recursive: true, force: true });
    },
  };
  try {
    await c.waitHealthy();
  } catch (e) {
    await c.stop();
    throw e;
  }
  return c;
}

/**
 * The member of `members` that leads the JetStream meta group now, asked of each one's `/jsz`
 * at `monitorUrl` (one that is down refuses at once), found by its server name with `named`.
 */
function metaLeaderAmong<T>(members: T[], monitorUrl: (m: T) => string, named: (serverName: string) => T): Promise<T> {
  return waitFor(
    "the JetStream meta group to have a leader",
    async () => {
      for (const m of members) {
        const leader = (await getJson<{ meta_cluster?: { leader?: string } }>(`${monitorUrl(m)}/jsz`).catch(() => undefined))?.meta_cluster?.leader;
        if (leader) return named(leader);
      }
      return undefined;
    },
    30_000,
    200,
  );
}

/**
 * A cluster of `size` (default 3) members with JetStream and no authentication, for a
 * benchmark that compares the mesh on a cluster with the mesh on one server (bench/): the same
 * layout as startOperatorCluster, without the operator.
 */
export interface PlainCluster {
  /** Every member's client URL, comma-separated: what NATS_URL takes. */
  url: string;
  members: NatsServer[];
  /** The member that leads the JetStream meta group now. */
  metaLeader(): Promise<NatsServer>;
  stop(): Promise<void>;
}

export async function startPlainCluster(opts: { size?: number } = {}): Promise<PlainCluster> {
  const size = opts.size ?? 3;
  const dir = mkdtempSync(join(tmpdir(), "mesh-plain-cluster-"));
  const ports = await Promise.all(Array.from({ length: size }, async () => ({ client: await freePort(), cluster: await freePort() })));
  const routes = ports.map((p) => `nats-route://127.0.0.1:${p.cluster}`).join(", ");
  const members: NatsServer[] = [];
  for (const [i, p] of ports.entries()) {
    const storeDir = join(dir, `n${i + 1}`);
    mkdirSync(storeDir, { recursive: true });
    const configFile = join(dir, `n${i + 1}.conf`);
    writeFileSync(
      configFile,
      `server_name: mesh-n${i + 1}\njetstream { store_dir: "${storeDir}" }\ncluster { name: mesh, listen: "127.0.0.1:${p.cluster}", routes: [${routes}] }\n`,
    );
    members.push(await startNatsServer({ port: p.client, configFile, storeDir }));
  }
  // A meta leader that lists every other member as a current peer: with a leader alone, an R3
  // stream made at once may be refused ("no suitable peers for placement"). Only the leader lists its peers.
  await waitFor(
    "the plain cluster's meta leader, with every member a current peer",
    async () => {
      for (const m of members) {
        const j = await getJson<{ meta_cluster?: { leader?: string; replicas?: Array<{ current?: boolean }> } }>(`http://127.0.0.1:${m.monitorPort}/jsz`).catch(
          () => undefined,
        );
        const peers = j?.meta_cluster?.replicas;
        if (j?.meta_cluster?.leader && peers && peers.length === size - 1 && peers.every((r) => r.current)) return true;
      }
      return undefined;
    },
    60_000,
    200,
  );
  return {
    url: members.map((m) => m.url).join(","),
    members,
    // Member i is server_name mesh-n<i+1>.
    metaLeader: () =>
      metaLeaderAmong(
        members,
        (m) => `http://127.0.0.1:${m.monitorPort}`,
        (name) => members[Number(name.replace(/^mesh-n/, "")) - 1]!,
      ),
    async stop() {
      await Promise.all(members.map((m) => m.stop({ keepStore: true }).catch(() => {})));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
