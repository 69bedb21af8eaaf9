/**
 * What holders' consumers cost a three-server cluster at rest: for N holders (`BENCH_SIZES`,
 * default 1,000 and 5,000), a cluster of its own with one holder stream and N durable consumers
 * made exactly as the rotator makes a holder's on a cluster (`holderStreamConfig` and
 * `holderConsumerConfig` with 3 replicas: R3 on file, one Raft group each), 64 requests at a
 * time as the rotator makes them. Printed per size, beside the same cluster with the stream
 * alone (the baseline, measured in the same run on the same servers before the consumers):
 *
 * - the time to make the N consumers, and then until every replica of every one is current
 *   (every member's `/healthz` ok);
 * - memory (the three servers' resident memory summed) and the store on disk;
 * - CPU at rest over `BENCH_REST_S` seconds (default 30), twice: the consumers alone, and with a
 *   pull in flight on each as an idle SDK holder keeps one (renewed when it expires after 30 s,
 *   idle heartbeats every 15 s; all N pulls sent from one connection here, where the holders
 *   would send one each);
 * - the replicas the meta leader's server holds (`/jsz`: its streams and consumers, with the
 *   meta group): with R3, every server holds one of each, so this is the Raft groups the cluster
 *   runs (the meta group, the stream's, one per consumer); with R1, only those placed there;
 * - the time to recover after one member is restarted (SIGTERM, start again on its store):
 *   until every member's `/healthz` is ok again.
 *
 * Then the per-holder cost between the sizes (the slope of a straight line through the two
 * sizes' figures) and what that line gives for 10,000 holders. `BENCH_REPLICAS=1` makes the
 * consumers as the rotator makes them on one server (R1, in memory) instead, on the same
 * cluster, for the comparison that chose R3. Prints figures; asserts nothing.
 * Runs only with `BENCH_CLUSTER=1` (it starts three servers and makes up to 15,000 consumer
 * replicas; `npm run bench` skips it otherwise).
 */
import { execFileSync } from "node:child_process";
import { createInbox, type NatsConnection } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { holderConsumerConfig, holderStreamConfig, type HolderEndpoint } from "@mesh/shared";
import { connectNats } from "@mesh/shared/runtime";
import { startPlainCluster, type PlainCluster } from "../test/harness/nats-cluster.js";
import { cpuOf, rssOf } from "./bench-child.js";
import { benchSizes } from "./rotation-rounds.js";

if (process.env.BENCH_CLUSTER !== "1") {
  console.log("holder consumers' cost on a cluster: skipped (BENCH_CLUSTER=1 runs it: three servers, up to 15,000 consumer replicas)");
  process.exit(0);
}

const sizes = benchSizes("1000,5000");
const REST_S = Number(process.env.BENCH_REST_S ?? 30);
const STREAM = "BENCH_HOLDERS";
/** The consumers' replicas: 3 as on a cluster, or 1 (`BENCH_REPLICAS=1`). */
const REPLICAS = process.env.BENCH_REPLICAS === "1" ? 1 : 3;
const endpoint = (i: number): HolderEndpoint => ({
  stream: STREAM,
  consumer: `h${i}`,
  subject: "bench.holders.key",
  streamSubjects: "bench.holders.>",
  sdk: true,
});

interface Figures {
  rssMiB: number;
  storeMiB: number;
  /** CPU of the three servers at rest, ms per s (1,000 = one core). */
  restCpu: number;
  /** The same with a pull in flight on every consumer. */
  restCpuPulls?: number;
  /** The meta group, and the streams and consumers the meta leader's server holds (`/jsz`). */
  raftGroups: number;
  /** Seconds until every member was healthy again after one was restarted. */
  recoverS: number;
}

const monitor = (m: PlainCluster["members"][number]) => `http://127.0.0.1:${m.monitorPort}`;

async function healthy(c: PlainCluster): Promise<boolean> {
  for (const m of c.members) {
    const ok = await fetch(`${monitor(m)}/healthz`, { signal: AbortSignal.timeout(5_000) }).then(
      (r) => r.ok,
      () => false,
    );
    if (!ok) return false;
  }
  return true;
}

/** Seconds until every member says it is healthy (at most `limitS`; Infinity past it). */
async function untilHealthy(c: PlainCluster, limitS = 900): Promise<number> {
  const t0 = performance.now();
  while (!(await healthy(c))) {
    if (performance.now() - t0 > limitS * 1000) return Infinity;
    await new Promise((r) => setTimeout(r, 500));
  }
  return (performance.now() - t0) / 1000;
}

const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
const rss = (c: PlainCluster) => sum(c.members.map((m) => rssOf(m.pid) ?? 0)) / 2 ** 20;
const storeMiB = (c: PlainCluster) => sum(c.members.map((m) => Number(execFileSync("du", ["-sk", m.storeDir], { encoding: "utf8" }).split("\t")[0]) / 1024));

/** The servers' CPU over `REST_S` seconds, in ms per second. */
async function restCpu(c: PlainCluster): Promise<number> {
  const pids = c.members.map((m) => m.pid);
  const c0 = sum(pids.map(cpuOf));
  const t0 = performance.now();
  await new Promise((r) => setTimeout(r, REST_S * 1000));
  return ((sum(pids.map(cpuOf)) - c0) / (performance.now() - t0)) * 1000;
}

/** The meta group, and the streams and consumers the meta leader's server holds (`/jsz`): with R3, the cluster's Raft groups. */
async function raftGroups(c: PlainCluster): Promise<number> {
  const leader = await c.metaLeader();
  const j = (await (await fetch(`http://127.0.0.1:${leader.monitorPort}/jsz`)).json()) as { streams?: number; consumers?: number };
  return 1 + (j.streams ?? 0) + (j.consumers ?? 0);
}

/** A pull in flight on each of `n` consumers, renewed as each expires, as idle SDK holders keep them. */
function idlePulls(nc: NatsConnection, n: number): { stop(): void } {
  const inbox = createInbox();
  const pull = (i: number) =>
    nc.publish(`$JS.API.CONSUMER.MSG.NEXT.${STREAM}.h${i}`, JSON.stringify({ batch: 1, expires: 30e9, idle_heartbeat: 15e9 }), { reply: `${inbox}.${i}` });
  const sub = nc.subscribe(`${inbox}.>`, {
    callback: (_e, m) => {
      // 408: the pull expired; pulled again, as the holder's next fetch.
      if (m.headers?.code === 408) pull(Number(m.subject.slice(inbox.length + 1)));
    },
  });
  for (let i = 0; i < n; i++) pull(i);
  return { stop: () => sub.unsubscribe() };
}

/** One member stopped and started again on its store; seconds until every member is healthy. */
async function restartOne(c: PlainCluster): Promise<number> {
  const m = c.members[1]!;
  await m.stop({ keepStore: true });
  const t0 = performance.now();
  await m.restart();
  await untilHealthy(c);
  return (performance.now() - t0) / 1000;
}

async function measure(c: PlainCluster, nc: NatsConnection, n: number): Promise<Figures> {
  const f: Figures = { rssMiB: rss(c), storeMiB: storeMiB(c), restCpu: await restCpu(c), raftGroups: await raftGroups(c), recoverS: 0 };
  if (n > 0) {
    const pulls = idlePulls(nc, n);
    await new Promise((r) => setTimeout(r, 2_000));
    f.restCpuPulls = await restCpu(c);
    pulls.stop();
  }
  f.recoverS = await restartOne(c);
  return f;
}

const rows: Array<{ n: number; make: number; current: number; base: Figures; with: Figures }> = [];
for (const n of sizes) {
  const cluster = await startPlainCluster();
  const nc = await connectNats(cluster.url, { maxReconnectAttempts: -1 });
  try {
    const jsm = await jetstreamManager(nc, { timeout: 30_000 });
    await jsm.streams.add(holderStreamConfig(endpoint(0), 3));
    await untilHealthy(cluster);
    const base = await measure(cluster, nc, 0);
    const t0 = performance.now();
    let next = 0;
    let made = 0;
    await Promise.all(
      Array.from({ length: 64 }, async () => {
        for (let i = next++; i < n; i = next++) {
          await jsm.consumers.add(STREAM, holderConsumerConfig(endpoint(i), REPLICAS));
          if (++made % 500 === 0) process.stderr.write(`  ${made}/${n} consumers made\n`);
        }
      }),
    );
    const make = (performance.now() - t0) / 1000;
    const current = await untilHealthy(cluster);
    const withConsumers = await measure(cluster, nc, n);
    rows.push({ n, make, current, base, with: withConsumers });
    const r = rows.at(-1)!;
    console.log(
      `${n} ${REPLICAS === 3 ? "R3 (file)" : "R1 (memory)"} consumers: made in ${r.make.toFixed(1)} s, every replica current ${r.current.toFixed(1)} s later; ` +
        `memory ${r.with.rssMiB.toFixed(0)} MiB (stream alone ${r.base.rssMiB.toFixed(0)}, ${(r.with.rssMiB / r.base.rssMiB).toFixed(1)}×); ` +
        `store ${r.with.storeMiB.toFixed(1)} MiB (${r.base.storeMiB.toFixed(1)}); ` +
        `CPU at rest ${r.with.restCpu.toFixed(0)} ms/s, with idle pulls ${r.with.restCpuPulls!.toFixed(0)} ms/s (stream alone ${r.base.restCpu.toFixed(0)}); ` +
        `${REPLICAS === 3 ? "Raft groups" : "replicas on the meta leader's server"} ${r.with.raftGroups} (${r.base.raftGroups}); ` +
        `a member restarted: healthy after ${r.with.recoverS.toFixed(1)} s (stream alone ${r.base.recoverS.toFixed(1)} s, ${(r.with.recoverS / r.base.recoverS).toFixed(1)}×)`,
    );
  } finally {
    await nc.close().catch(() => undefined);
    await cluster.stop();
  }
}

if (rows.length >= 2) {
  const [a, b] = [rows[0]!, rows.at(-1)!];
  const per = (f: (r: (typeof rows)[number]) => number) => (f(b) - f(a)) / (b.n - a.n);
  const at = (f: (r: (typeof rows)[number]) => number, n: number) => f(a) + per(f) * (n - a.n);
  const lines: Array<[string, (r: (typeof rows)[number]) => number, string]> = [
    ["memory", (r) => r.with.rssMiB, "MiB"],
    ["store", (r) => r.with.storeMiB, "MiB"],
    ["CPU at rest", (r) => r.with.restCpu, "ms/s"],
    ["CPU at rest with idle pulls", (r) => r.with.restCpuPulls ?? 0, "ms/s"],
    ["making them", (r) => r.make, "s"],
    ["until every replica is current", (r) => r.current, "s"],
    ["recovery after a restart", (r) => r.with.recoverS, "s"],
  ];
  console.log(`per holder between ${a.n} and ${b.n} (a straight line through both), and what it gives for 10,000:`);
  for (const [name, f, unit] of lines) {
    const slope = per(f);
    const perHolder =
      unit === "MiB" ? `${(slope * 1024).toFixed(1)} KiB` : unit === "s" ? `${(slope * 1000).toFixed(2)} ms` : `${(slope * 1000).toFixed(2)} µs/s`;
    console.log(
      `  ${name}: ${perHolder} per holder; ${at(f, 10_000).toFixed(1)} ${unit} at 10,000 (${f(a).toFixed(1)} at ${a.n}, ${f(b).toFixed(1)} at ${b.n})`,
    );
  }
}
