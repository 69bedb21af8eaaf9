/**
 * Rotation fan-out: time from `rotate` to `Committed` for a `secret` grant held by 10, 100,
 * 1,000 and 5,000 SDK holders (each on its own NATS connection), beside the raw floor measured
 * in the same run on the same connections: one NATS request answered by the same number of
 * plain responders (no mesh logic). Then one `postgres.database` rotation with 100 holders that
 * each prove the new credential by logging in, beside the bare cost of those 100 logins.
 *
 * The holders and the floor's responders run in forked holder processes (holder-process.ts, at
 * most `BENCH_HOLDERS_PER_PROCESS`, default 500, each), the resolver and the provisioner in a
 * process of their own (services-process.ts), so this process runs only the rotator and the
 * benchmark's requests and timing (on a connection of its own). The floor requests and the
 * rotations alternate, so both see the same load of the machine; the CPU each process spent
 * on them is printed too. Each size starts with one round of both that is timed and printed
 * but not counted in the percentiles (warm-up: the code paths).
 *
 * The protocol measured: one broadcast per holder stream (one message for all the SDK instances
 * of a part, k+1's values in it under the part's rotation key), a durable consumer per holder,
 * the holder's JetStream ack as its confirmation, counted from the server's ack metrics. The
 * protocol before it (a sealed notice per holder, confirmations as plain messages batched into a
 * record) is not kept runnable; its figures on this machine were 2.4–2.8× the floor at 1,000
 * holders and 3.0× at 5,000 (issue 14, and the closing notes of the sessions before).
 *
 * Prints figures; asserts nothing. `BENCH_SIZES=10,100` narrows the sizes (`BENCH_SIZES=` with
 * nothing skips them, `BENCH_PG=0` skips the PostgreSQL run); `BENCH_RUNS=N` sets the rounds per
 * size (after the first); `BENCH_PHASES=1` prints, per rotation, when each state was entered and the spread of the
 * holders' confirmations (the server's times of their acks); `BENCH_PROFILE_DIR=DIR` writes a CPU profile of this
 * process and of each holder process over each size's counted rounds
 * (`rotator-<n>.cpuprofile`, `holders-<n>-<i>.cpuprofile`). 5,000 holders need about 5,300
 * open files (nats-server holds one end of each connection): bench/run.mjs raises the soft
 * limit to the hard one; this file says when it is short.
 */
import { fork, type ChildProcess } from "node:child_process";
import { randomBytes, randomUUID } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { Grant, HOLDER_STREAM_PREFIX, Kinds, Rotation, RotationStates, connectNats, createLogger, keys, openStore, parseMasterKey, readJson, subjects, type ModuleDoc, type Store } from "@mesh/shared";
import { CredentialStore } from "@mesh/providers";
import { startRotator } from "@mesh/rotator";
import { startNatsServer } from "../test/harness/nats-server.js";
import { startPlainCluster } from "../test/harness/nats-cluster.js";
import { startPostgres } from "../test/harness/postgres.js";
import { startProfile } from "./profile.js";
import { forkServices } from "./services-fork.js";

const sizes = (process.env.BENCH_SIZES ?? "10,100,1000,5000").split(",").filter(Boolean).map(Number);
const withPg = process.env.BENCH_PG !== "0";
/** Holders per holder process (`BENCH_HOLDERS_PER_PROCESS`); each process runs on one core at most. */
const HOLDERS_PER_PROCESS = Number(process.env.BENCH_HOLDERS_PER_PROCESS || 500);
/** Rounds (one floor request, one rotation) per size (`BENCH_RUNS`), after a first one not counted; default 20, 5 at 5,000 holders (their p50s moved by a fifth between runs of 10). */
const RUNS = process.env.BENCH_RUNS ? Number(process.env.BENCH_RUNS) : undefined;
const FLOOR_SUBJECT = "bench.floor";
const mib = (b: number) => `${(b / 1024 / 1024).toFixed(0)} MiB`;
const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]!;
};
const ms = (x: number) => `${x.toFixed(0)} ms`;

async function waitUntil(what: string, f: () => Promise<boolean> | boolean, timeoutMs = 120_000, everyMs = 2): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await f())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

// BENCH_CLUSTER=1: the same on a three-server cluster with JetStream (every bucket and stream
// R3, detected from the servers), to print what the cluster costs the fan-out.
const onCluster = process.env.BENCH_CLUSTER === "1";
const nats = onCluster ? await startPlainCluster() : await startNatsServer();
console.log(onCluster ? `on a three-server cluster (R3): ${nats.url}` : `on one server: ${nats.url}`);
/** The nats-server processes: their CPU and memory are summed as "nats-server". */
const serverPids = () => ("members" in nats ? nats.members.map((m) => m.pid) : [nats.pid]);
const serverCpu = () => serverPids().reduce((t, pid) => t + cpuOf(pid), 0);
const log = createLogger("bench", { level: "error" });
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

async function apply(docs: unknown[]) {
  const m = await nc.request(subjects.apply, JSON.stringify({ documents: docs }), { timeout: 10_000 });
  if (!(m.json() as { ok: boolean }).ok) throw new Error(`apply failed: ${m.string()}`);
}

/** A forked holder process (bench/holder-process.ts), spoken to by request and reply over IPC. */
class HolderProcess {
  private next = 0;
  private readonly pending = new Map<number, { resolve(v: unknown): void; reject(e: Error): void }>();
  private exited: string | undefined;
  readonly child: ChildProcess;

  constructor() {
    // Forked with this process's flags (tsx's loader, --expose-gc), so it runs from sources too.
    this.child = fork(fileURLToPath(new URL("./holder-process.ts", import.meta.url)), [], { stdio: "inherit" });
    this.child.on("message", (m: { id: number; result?: unknown; error?: string }) => {
      const p = this.pending.get(m.id);
      this.pending.delete(m.id);
      if (m.error !== undefined) p?.reject(new Error(`holder process: ${m.error}`));
      else p?.resolve(m.result);
    });
    this.child.on("exit", (code, signal) => {
      this.exited = `a holder process exited (${code ?? signal})`;
      for (const p of this.pending.values()) p.reject(new Error(this.exited));
      this.pending.clear();
    });
  }

  call<T>(op: string, body: Record<string, unknown> = {}): Promise<T> {
    if (this.exited) return Promise.reject(new Error(this.exited));
    const id = this.next++;
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.child.send({ id, op, ...body });
    });
  }

  async stop(): Promise<void> {
    if (this.exited) return;
    const gone = new Promise((r) => this.child.once("exit", r));
    await this.call("stop").catch(() => undefined);
    await gone;
  }
}

/**
 * Runs `n` holders of module/part/req, each on its own connection, in holder processes of at
 * most {@link HOLDERS_PER_PROCESS} each, with a floor responder on every connection; with
 * `pgEndpoint` each holder logs in with the new values before it confirms.
 */
async function startHolders(n: number, module: string, req: string, pgEndpoint?: string) {
  const procs = Array.from({ length: Math.ceil(n / HOLDERS_PER_PROCESS) }, () => new HolderProcess());
  const share = Math.ceil(n / procs.length);
  try {
    // One process after the other: all at once, 5,000 holders opening their KV buckets time out.
    for (const [i, p] of procs.entries()) {
      await p.call("start", { url: nats.url, module, requirement: req, first: i * share, count: Math.min(share, n - i * share), floorSubject: FLOOR_SUBJECT, ...(pgEndpoint ? { pgEndpoint } : {}) });
    }
  } catch (e) {
    await Promise.all(procs.map((p) => p.stop()));
    throw e;
  }
  return {
    procs,
    /** The lowest generation any holder is on. */
    generation: async () => Math.min(...(await Promise.all(procs.map((p) => p.call<number>("generation"))))),
    /** The holder processes' resident memory, summed. */
    rss: () => procs.reduce((sum, p) => sum + (rssOf(p.child.pid!) ?? 0), 0),
    stop: () => Promise.all(procs.map((p) => p.stop())),
  };
}

/** The floor, once: one request answered by `n` plain responders (one on each holder's connection), until all replied. */
async function floorOnce(n: number): Promise<number> {
  const t0 = performance.now();
  let got = 0;
  for await (const _ of await nc.requestMany(FLOOR_SUBJECT, "", { strategy: "count", maxMessages: n, maxWait: 30_000 })) got++;
  if (got !== n) throw new Error(`floor: ${got}/${n} replies`);
  return performance.now() - t0;
}

/** Files this process may open (soft limit), from /proc; undefined where that is not readable. */
function openFilesLimit(): number | undefined {
  try {
    const m = /^Max open files\s+(\d+|unlimited)/m.exec(readFileSync("/proc/self/limits", "utf8"));
    return m ? (m[1] === "unlimited" ? Infinity : Number(m[1])) : undefined;
  } catch {
    return undefined;
  }
}

/** Resident memory of a process in bytes (Linux), or undefined. */
/** The holder streams (MESH_HOLD_…) and their consumers. */
async function countHolderStreams(): Promise<{ streams: number; consumers: number }> {
  let streams = 0;
  let consumers = 0;
  for await (const si of driver.jsm.streams.list()) {
    if (!si.config.name.startsWith(HOLDER_STREAM_PREFIX)) continue;
    streams++;
    consumers += si.state.consumer_count;
  }
  return { streams, consumers };
}

function rssOf(pid: number): number | undefined {
  try {
    const m = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return m ? Number(m[1]) * 1024 : undefined;
  } catch {
    return undefined;
  }
}

/** CPU time (user + system) a process has used so far, in ms (Linux; 10 ms ticks), or 0 where unreadable. */
function cpuOf(pid: number): number {
  try {
    // The fields after the command name (which is in parentheses and may hold spaces): utime and stime are the 12th and 13th.
    const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
    return ((Number(f[11]) + Number(f[12])) * 1000) / 100;
  } catch {
    return 0;
  }
}

/** CPU spent, in ms, by this (the rotator's) process, the holder processes, the other services and nats-server. */
interface CpuSpent {
  rotator: number;
  holders: number;
  services: number;
  server: number;
}

/** Adds the CPU each process spent while `f` runs into `into`. */
async function cpuDuring<T>(holderPids: readonly number[], into: CpuSpent, f: () => Promise<T>): Promise<T> {
  const sum = () => holderPids.reduce((t, pid) => t + cpuOf(pid), 0);
  const [r0, h0, s0, n0] = [process.cpuUsage(), sum(), cpuOf(services.pid), serverCpu()];
  const value = await f();
  const r = process.cpuUsage(r0);
  into.rotator += (r.user + r.system) / 1000;
  into.holders += sum() - h0;
  into.services += cpuOf(services.pid) - s0;
  into.server += serverCpu() - n0;
  return value;
}

/** Prints when each state was entered and the holders' received/applied/confirmed spread (ms after the request). */
function printPhases(r: Rotation, t0wall: number) {
  const start = Date.parse(r.requestedAt);
  const at = (s: string) => {
    const x = r.history.find((e) => e.state === s);
    return x ? `${Date.parse(x.at) - start}` : "-";
  };
  const hs = Object.values(r.holders);
  const spread = (k: "c") => {
    const xs = hs.map((p) => p[k]).filter((x): x is number => x !== undefined);
    return xs.length ? `${pct(xs, 1)}/${pct(xs, 50)}/${pct(xs, 100)}` : "-";
  };
  const found = hs.filter((p) => p.f).length;
  console.log(
    `        request→Staged ${start - t0wall} ms, then Broadcast +${at("Broadcast")}, AwaitingHolders +${at("AwaitingHolders")}, Committed +${at("Committed")} | holders' acks (min/p50/max ms, the server's clock): ${spread("c")}${found ? `, ${found} found in ack floors` : ""} | ${r.broadcasts.length} broadcast messages`,
  );
}

/**
 * The commits of one grant's rotations, as a KV watch of its record sees them: opened once per
 * grant, so each round costs the process under measurement only the record writes it receives
 * (not a new watch and a read of the whole record).
 */
class CommitWatch {
  /** The generation of the last committed rotation seen. */
  private committedTo = 0;
  private waiter: { after: number; resolve(v: { at: number; record: Rotation }): void } | undefined;
  private constructor(private readonly w: Awaited<ReturnType<Store["kv"]["rotations"]["watch"]>>) {
    void (async () => {
      for await (const e of w) {
        if (e.operation !== "PUT" || !e.length) continue;
        // Decoded only once committed: the record is rewritten on every confirmation batch, 42 KB at 1,000 holders.
        const text = e.string();
        if (!text.includes(`"state":"${RotationStates.Committed}"`)) continue;
        const at = performance.now();
        const r = JSON.parse(text) as Rotation;
        if (r.state !== RotationStates.Committed) continue;
        this.committedTo = Math.max(this.committedTo, r.to);
        if (this.waiter && r.to > this.waiter.after) {
          const waiter = this.waiter;
          this.waiter = undefined;
          waiter.resolve({ at, record: r });
        }
      }
    })();
  }

  static async open(module: string, req: string): Promise<CommitWatch> {
    const key = keys.grant(module, req);
    const cw = new CommitWatch(await driver.kv.rotations.watch({ key }));
    // What is committed already (the watch's first value may not have arrived yet).
    cw.committedTo = Math.max(cw.committedTo, (await readJson(driver.kv.rotations, key, Rotation))?.value.to ?? 0);
    return cw;
  }

  /** Resolves when a rotation to a generation above the last committed one commits (within `timeoutMs`). */
  next(timeoutMs: number): Promise<{ at: number; record: Rotation }> {
    const after = this.committedTo;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no commit within ${timeoutMs / 1000} s`)), timeoutMs);
      this.waiter = { after, resolve: (v) => (clearTimeout(timer), resolve(v)) };
    });
  }

  stop(): void {
    this.w.stop();
  }
}

/** One rotation of module/req: from the rotate request until the record says `Committed` (seen by a watch, not by polling). */
async function rotateOnce(commits: CommitWatch, module: string, req: string): Promise<number> {
  const seen = commits.next(300_000);
  const t0 = performance.now();
  const t0wall = Date.now();
  // With a request id, as meshctl sends it: a request the rotator retries inside (a cluster's JetStream gap) starts one rotation, not two.
  const m = await nc.request(subjects.rotate, JSON.stringify({ grant: `${module}/${req}`, requestId: randomUUID() }), { timeout: 60_000 });
  const reply = m.json() as { ok: boolean; error?: { message: string } };
  if (!reply.ok) throw new Error(`rotate refused: ${reply.error?.message}`);
  const { at, record } = await seen;
  if (process.env.BENCH_PHASES) printPhases(Rotation.parse(record), t0wall);
  return at - t0;
}

/** Samples the peak resident memory of this (the rotator's) process and of the holder processes while `f` runs. */
async function peaksDuring<T>(holderRss: () => number, f: () => Promise<T>): Promise<{ value: T; rotator: number; holders: number }> {
  // process.memoryUsage.rss(), not process.memoryUsage(): the latter walks the heap, a cost in the process measured.
  let rotator = process.memoryUsage.rss();
  let holders = holderRss();
  const sampler = setInterval(() => {
    rotator = Math.max(rotator, process.memoryUsage.rss());
    holders = Math.max(holders, holderRss());
  }, 200);
  try {
    return { value: await f(), rotator, holders };
  } finally {
    clearInterval(sampler);
  }
}

/**
 * With `BENCH_PROFILE_DIR` set, starts CPU profiles of this process and of the holder
 * processes; the function returned writes them to `<dir>/rotator-<n>.cpuprofile` and
 * `<dir>/holders-<n>-<i>.cpuprofile`. Without it, does nothing.
 */
async function startProfiles(n: number, procs: readonly HolderProcess[]): Promise<() => Promise<void>> {
  const dir = process.env.BENCH_PROFILE_DIR;
  if (!dir) return async () => undefined;
  const stop = await startProfile();
  await Promise.all(procs.map((p) => p.call("profile")));
  return async () => {
    writeFileSync(join(dir, `rotator-${n}.cpuprofile`), await stop());
    await Promise.all(procs.map(async (p, i) => writeFileSync(join(dir, `holders-${n}-${i}.cpuprofile`), await p.call<string>("profile"))));
  };
}

const fdLimit = openFilesLimit();
console.log(
  `rotation fan-out, secret grant, SDK holders each on its own NATS connection, in holder processes of at most ${HOLDERS_PER_PROCESS}; the rotator in a process of its own; floor and rotations interleaved`,
);
console.log(
  "holders | rotate→Committed p50 / p99 (runs) | floor p50 / p99 (1 request, N responders on the holders' connections) | ratio p50 | memory: holder processes' RSS (count), rotator process peak RSS, nats-server RSS",
);
for (const n of sizes) {
  // The holder processes hold one end of each connection, nats-server the other.
  if (fdLimit !== undefined && fdLimit < n + 300) {
    console.log(`${String(n).padStart(7)} | skipped: ${n} connections need about ${n + 300} open files, the limit is ${fdLimit} (raise it: ulimit -n ${n + 300})`);
    continue;
  }
  const module = `fan${n}`;
  await apply([{ kind: "Module", name: module, parts: [{ name: "app", node: "n1", installed: true }], requires: [{ name: "key", kind: Kinds.Secret }] } satisfies Partial<ModuleDoc>]);
  await waitUntil("grant provisioned", async () => ((await readJson(driver.kv.grants, keys.grant(module, "key"), Grant))?.value.generation ?? 0) >= 1);
  const h = await startHolders(n, module, "key");
  const commits = await CommitWatch.open(module, "key");
  try {
    await waitUntil("holders on generation 1", async () => (await h.generation()) >= 1, 120_000, 20);
    global.gc?.();
    const runs = RUNS ?? (n >= 5000 ? 5 : 20);
    const times: number[] = [];
    let first = { rotation: 0, floor: 0 };
    const floors: number[] = [];
    const pids = h.procs.map((p) => p.child.pid!);
    const floorCpu: CpuSpent = { rotator: 0, holders: 0, services: 0, server: 0 };
    const rotationCpu: CpuSpent = { rotator: 0, holders: 0, services: 0, server: 0 };
    const { rotator: rotatorRss, holders } = await peaksDuring(h.rss, async () => {
      // A first round, timed and printed but not counted, for floor and rotation alike: it warms the code paths.
      first = { floor: await floorOnce(n), rotation: await rotateOnce(commits, module, "key") };
      const stopProfiles = await startProfiles(n, h.procs);
      // Interleaved, so both see the same load of the machine.
      for (let r = 0; r < runs; r++) {
        floors.push(await cpuDuring(pids, floorCpu, () => floorOnce(n)));
        times.push(await cpuDuring(pids, rotationCpu, () => rotateOnce(commits, module, "key")));
      }
      await stopProfiles();
    });
    const serverRss = serverPids().reduce<number | undefined>((t, pid) => (t === undefined ? undefined : (rssOf(pid) ?? NaN) + t), 0);
    // What the server holds for the holders: a consumer each (in their part's stream), beside the mesh's own.
    const account = await driver.jsm.getAccountInfo();
    const holderStreams = await countHolderStreams();
    console.log(
      `${String(n).padStart(7)} | ${ms(pct(times, 50))} / ${ms(pct(times, 99))} (${runs}) | ${ms(pct(floors, 50))} / ${ms(pct(floors, 99))} | ${(pct(times, 50) / pct(floors, 50)).toFixed(1)}× | ${mib(holders)} (${h.procs.length}), ${mib(rotatorRss)}, ${serverRss === undefined ? "?" : mib(serverRss)}`,
    );
    const per = (c: CpuSpent) =>
      `${ms((c.rotator + c.holders + c.services + c.server) / runs)} (rotator's process ${ms(c.rotator / runs)}, holders ${ms(c.holders / runs)}, other services ${ms(c.services / runs)}, nats-server ${ms(c.server / runs)})`;
    console.log(`        CPU per round (10 ms ticks): floor ${per(floorCpu)}; rotation ${per(rotationCpu)}`);
    console.log(`        the server holds ${account.consumers} consumers (${n} of them the holders', in ${holderStreams.streams} holder streams with ${holderStreams.consumers} consumers) in ${account.streams} streams, at ${serverRss === undefined ? "?" : mib(serverRss)} RSS`);
    console.log(`        first round, not counted above (warm-up): rotation ${ms(first.rotation)}, floor ${ms(first.floor)}`);
  } finally {
    commits.stop();
    await h.stop();
  }
}

if (pgServer) {
  const n = 100;
  await apply([
    { kind: "Provider", name: "pg-bench", serves: [Kinds.PostgresDatabase], node: "n1", endpoint: pgServer.endpoint, admin: { username: pgServer.adminUser, passwordEnv: ADMIN_ENV } },
    { kind: "Module", name: "pgfan", parts: [{ name: "app", node: "n1" }], requires: [{ name: "db", kind: Kinds.PostgresDatabase }] },
  ]);
  await waitUntil("pg grant provisioned", async () => ((await readJson(driver.kv.grants, keys.grant("pgfan", "db"), Grant))?.value.generation ?? 0) >= 1);
  // One holder process: its limit of 40 logins at once holds for all 100 holders, and for the baseline alike.
  const h = await startHolders(n, "pgfan", "db", pgServer.endpoint);
  try {
    await waitUntil("pg holders on generation 1", async () => (await h.generation()) >= 1, 120_000, 20);
    const times: number[] = [];
    const commits = await CommitWatch.open("pgfan", "db");
    for (let r = 0; r < 3; r++) times.push(await rotateOnce(commits, "pgfan", "db"));
    commits.stop();
    // Baseline: the same 100 logins, bare, at once, from the same holder process.
    const cur = (await readJson(driver.kv.grants, keys.grant("pgfan", "db"), Grant))!.value.generation;
    const values = (await new CredentialStore(driver.kv.credentials, masterKey).read("pgfan", "db", cur))!.bindings!;
    const bare: number[] = [];
    for (let r = 0; r < 3; r++) bare.push(await h.procs[0]!.call<number>("logins", { values, n }));
    console.log(`\npostgres.database, ${n} SDK holders (one holder process) each logging in with the new credential before confirming (at most 40 logins at once)`);
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
