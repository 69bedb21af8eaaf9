/**
 * Rotation fan-out: time from `rotate` to `Committed` for a `secret` grant held by 10, 100,
 * 1,000 and 5,000 SDK holders (each on its own NATS connection), beside two floors measured in
 * the same run on the same connections: the core floor, one NATS request answered by the same
 * number of plain responders (no mesh logic), and the bare JetStream floor, the design's own
 * shape with no mesh code (rotation-rounds.ts's BareFloor: a stream and consumers made as the
 * holders' are, one publish, every holder pulling and acknowledging, the acks counted from the
 * server's ack metrics as the rotator counts them). Then one `postgres.database` rotation with
 * 100 holders that each prove the new credential by logging in, beside the bare cost of those
 * 100 logins.
 *
 * The holders and the floors' responders and consumers run in forked holder processes
 * (holder-process.ts, at most `BENCH_HOLDERS_PER_PROCESS`, default 500, each), the resolver and
 * the provisioner in a process of their own (services-process.ts), so this process runs only
 * the rotator and the benchmark's requests and timing (on a connection of its own). The floors
 * and the rotations alternate, so all see the same load of the machine; the CPU each process
 * spent on them is printed too. Each size starts with one round of each that is timed and
 * printed but not counted in the percentiles (warm-up: the code paths). The rounds, the floor and the
 * holder processes are rotation-rounds.ts's, shared with rotation-operator.bench.ts (the same
 * measure in operator mode, with every holder's permissions in force).
 *
 * The protocol measured: one broadcast per holder stream (one message for all the SDK instances
 * of a part, k+1's values in it under the part's rotation key), a durable consumer per holder,
 * the holder's JetStream ack as its confirmation, counted from the server's ack metrics. The
 * protocol before it (a sealed notice per holder, confirmations as plain messages batched into a
 * record) is not kept runnable; its figures are in docs/design.md ("The cost model of a holder").
 *
 * Prints figures; asserts nothing. `BENCH_SIZES=10,100` narrows the sizes (`BENCH_SIZES=` with
 * nothing skips them, `BENCH_PG=0` skips the PostgreSQL run); `BENCH_RUNS=N` sets the rounds per
 * size (after the first); `BENCH_PHASES=1` prints, per rotation, when each state was entered and the spread of the
 * holders' confirmations (the server's times of their acks); `BENCH_PROFILE_DIR=DIR` writes a CPU profile of this
 * process and of each holder process over each size's counted rounds
 * (`rotator-<n>.cpuprofile`, `holders-<n>-<i>.cpuprofile`); `BENCH_ROTATOR_LOG=warn` shows the
 * rotator's warnings (default: errors only). 5,000 holders need about 5,300
 * open files (nats-server holds one end of each connection): bench/run.mjs raises the soft
 * limit to the hard one; this file says when it is short.
 */
import { randomBytes } from "node:crypto";
import { createInbox } from "@nats-io/transport-node";
import { Grant, Kinds, keys, parseMasterKey, type ModuleDoc } from "@mesh/shared";
import { connectNats, openStore, readJson } from "@mesh/shared/runtime";
import { createLogger } from "@mesh/shared/service";
import { CredentialStore } from "@mesh/providers";
import { startRotator } from "@mesh/rotator";
import { startNatsServer } from "../test/harness/nats-server.js";
import { startPlainCluster } from "../test/harness/nats-cluster.js";
import { startPostgres } from "../test/harness/postgres.js";
import { forkServices } from "./services-fork.js";
import {
  CommitWatch,
  HOLDERS_PER_PROCESS,
  applyDocs,
  benchSizes,
  measureSdkHolders,
  ms,
  pct,
  rotateOnce,
  roundsHeader,
  startHolders,
  waitProvisioned,
  waitUntil,
} from "./rotation-rounds.js";

const sizes = benchSizes("10,100,1000,5000");
const withPg = process.env.BENCH_PG !== "0";
/** Rounds (one floor request, one rotation) per size (`BENCH_RUNS`), after a first one not counted; default 20, 5 at 5,000 holders (their p50s moved by a fifth between runs of 10). */
const RUNS = process.env.BENCH_RUNS ? Number(process.env.BENCH_RUNS) : undefined;
const FLOOR_SUBJECT = "bench.floor";

// BENCH_CLUSTER=1: the same on a three-server cluster with JetStream (every bucket and stream
// R3, detected from the servers), to print what the cluster costs the fan-out.
const onCluster = process.env.BENCH_CLUSTER === "1";
const nats = onCluster ? await startPlainCluster() : await startNatsServer();
console.log(onCluster ? `on a three-server cluster (R3): ${nats.url}` : `on one server: ${nats.url}`);
/** The nats-server processes: their CPU and memory are summed as "nats-server". */
const serverPids = () => ("members" in nats ? nats.members.map((m) => m.pid) : [nats.pid]);
const log = createLogger("bench", { level: (process.env.BENCH_ROTATOR_LOG ?? "error") as "error" });
// The rotator's connection, and the benchmark's own (requests, the floor, watching for the commit).
const store = await openStore(await connectNats(nats.url));
const nc = await connectNats(nats.url);
const driver = await openStore(nc);
const masterKeyHex = randomBytes(32).toString("hex");
const masterKey = parseMasterKey(masterKeyHex);
const ADMIN_ENV = "PG_BENCH_ADMIN_PASSWORD";
// Room for the holders' logins beside the provisioner's and the rotator's admin pools (the harness's default is 40).
const pgServer = withPg ? await startPostgres({ maxConnections: 150 }) : undefined;
const env = { ...process.env, [ADMIN_ENV]: pgServer?.adminPassword ?? "" };
const services = await startServices();
const rotator = await startRotator({ store, masterKey, log, env, sweepMs: 1_000 });

/** The resolver and the provisioner, in a process of their own (services-process.ts). */
function startServices() {
  return forkServices({ url: nats.url, masterKeyHex, env: { [ADMIN_ENV]: pgServer?.adminPassword ?? "" } });
}

console.log(
  `rotation fan-out, secret grant, SDK holders each on its own NATS connection, in holder processes of at most ${HOLDERS_PER_PROCESS}; the rotator in a process of its own; floor and rotations interleaved`,
);
console.log(roundsHeader("holders"));
for (const n of sizes) {
  const module = `fan${n}`;
  await applyDocs(nc, [
    {
      kind: "Module",
      name: module,
      parts: [{ name: "app", node: "n1", installed: true }],
      requires: [{ name: "key", kind: Kinds.Secret }],
    } satisfies Partial<ModuleDoc>,
  ]);
  await waitProvisioned(driver, module, "key");
  await measureSdkHolders({
    n,
    nc,
    store: driver,
    start: { url: nats.url, module, requirement: "key", floorSubject: FLOOR_SUBJECT },
    replyTo: createInbox(),
    runs: RUNS ?? (n >= 5000 ? 5 : 20),
    label: String(n),
    pids: { services: [services.pid], server: serverPids() },
    bareReplicas: onCluster ? 3 : 1,
  });
}

if (pgServer) {
  const n = 100;
  await applyDocs(nc, [
    {
      kind: "Provider",
      name: "pg-bench",
      serves: [Kinds.PostgresDatabase],
      node: "n1",
      endpoint: pgServer.endpoint,
      admin: { username: pgServer.adminUser, passwordEnv: ADMIN_ENV },
    },
    { kind: "Module", name: "pgfan", parts: [{ name: "app", node: "n1" }], requires: [{ name: "db", kind: Kinds.PostgresDatabase }] },
  ]);
  await waitProvisioned(driver, "pgfan", "db");
  // One holder process: its limit of 40 logins at once holds for all 100 holders, and for the baseline alike.
  const h = await startHolders(n, { url: nats.url, module: "pgfan", requirement: "db", floorSubject: FLOOR_SUBJECT, pgEndpoint: pgServer.endpoint });
  try {
    await waitUntil("pg holders on generation 1", async () => (await h.generation()) >= 1, 120_000, 20);
    const times: number[] = [];
    const commits = await CommitWatch.open(driver.kv.rotations, "pgfan", "db");
    for (let r = 0; r < 3; r++) times.push(await rotateOnce(nc, [commits]));
    commits.stop();
    // Baseline: the same 100 logins, bare, at once, from the same holder process.
    const cur = (await readJson(driver.kv.grants, keys.grant("pgfan", "db"), Grant))!.value.generation;
    const values = (await new CredentialStore(driver.kv.credentials, masterKey).read("pgfan", "db", cur))!.bindings!;
    const bare: number[] = [];
    for (let r = 0; r < 3; r++) bare.push(await h.procs[0]!.call<number>("logins", { values, n }));
    console.log(
      `\npostgres.database, ${n} SDK holders (one holder process) each logging in with the new credential before confirming (at most 40 logins at once)`,
    );
    console.log(
      `rotate→Committed p50 ${ms(pct(times, 50))}, p99 ${ms(pct(times, 99))} (3 runs) | baseline, the same ${n} logins bare (same limit): p50 ${ms(pct(bare, 50))}, p99 ${ms(pct(bare, 99))} | ratio p50 ${(pct(times, 50) / pct(bare, 50)).toFixed(1)}×`,
    );
  } finally {
    await h.stop();
  }
}

await rotator.stop();
await services.stop();
await nc.close();
await store.nc.close();
await nats.stop();
await pgServer?.stop();
process.exit(0);
