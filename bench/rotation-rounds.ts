/**
 * What the rotation benchmarks (rotation.bench.ts, rotation-operator.bench.ts) share: the holder
 * processes, the core floor (one message to N responders on the holders' connections, N
 * replies), the bare JetStream floor (the rotation's own shape with no mesh code), one rotation
 * from the rotate request until a watch sees it `Committed`, and the rounds of all three,
 * interleaved, with the CPU each process spent and the peak memory, printed as one row per size
 * beside the floors.
 */
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import {
  Grant,
  HOLDER_STREAM_PREFIX,
  Rotation,
  RotationStates,
  holderConsumerConfig,
  holderStreamConfig,
  keys,
  subjects,
  type HolderEndpoint,
} from "@mesh/shared";
import { readJson, type JetStreamClient, type JetStreamManager, type KV, type NatsConnection, type Store } from "@mesh/shared/runtime";
import { BenchChild, cpuOf, rssOf } from "./bench-child.js";
import { startProfile, writeProfile } from "./profile.js";

/** Sizes from `BENCH_SIZES` (comma-separated; empty skips them all), else `defaults`. */
export function benchSizes(defaults: string): number[] {
  return (process.env.BENCH_SIZES ?? defaults).split(",").filter(Boolean).map(Number);
}

export const mib = (b: number) => `${(b / 1024 / 1024).toFixed(0)} MiB`;
export const ms = (x: number) => `${x.toFixed(0)} ms`;
export const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]!;
};

export async function waitUntil(what: string, f: () => Promise<boolean> | boolean, timeoutMs = 120_000, everyMs = 2): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await f())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/** Applies `docs` through the resolver, on `nc`; throws when it refuses them. */
export async function applyDocs(nc: NatsConnection, docs: unknown[]): Promise<void> {
  const m = await nc.request(subjects.apply, JSON.stringify({ documents: docs }), { timeout: 10_000 });
  if (!(m.json() as { ok: boolean }).ok) throw new Error(`apply failed: ${m.string()}`);
}

/** Waits until grant module/req has its first generation. */
export function waitProvisioned(store: Store, module: string, req: string): Promise<void> {
  return waitUntil(
    `grant ${module}/${req} provisioned`,
    async () => ((await readJson(store.kv.grants, keys.grant(module, req), Grant))?.value.generation ?? 0) >= 1,
  );
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

/** The row of a size skipped because `n` holders' connections need more open files than this process may open; undefined when they fit. */
function openFilesShort(n: number): string | undefined {
  const limit = openFilesLimit();
  // The holder processes hold one end of each connection, nats-server the other.
  if (limit === undefined || limit >= n + 300) return undefined;
  return `${String(n).padStart(7)} | skipped: ${n} connections need about ${n + 300} open files, the limit is ${limit} (raise it: ulimit -n ${n + 300})`;
}

/** Holders per holder process (`BENCH_HOLDERS_PER_PROCESS`); each process runs on one core at most. */
export const HOLDERS_PER_PROCESS = Number(process.env.BENCH_HOLDERS_PER_PROCESS || 500);

/** What every holder process is started with (holder-process.ts's `start`), but its share of the holders. */
export interface HoldersStart {
  url: string;
  module: string;
  part?: string;
  node?: string;
  requirement: string;
  floorSubject: string;
  /** The bare JetStream floor's consumers, one per holder connection ({@link BareFloor}). */
  bare?: { stream: string; consumerPrefix: string };
  identityDir?: string;
  pgEndpoint?: string;
}

/** `n` SDK holders in holder processes (holder-process.ts) of at most {@link HOLDERS_PER_PROCESS} each. */
export interface Holders {
  procs: BenchChild[];
  /** What each process's `start` answered (with an identity: whether the server refused a publish outside it). */
  started: unknown[];
  /** The lowest generation any holder is on. */
  generation(): Promise<number>;
  /** The holder processes' resident memory, summed. */
  rss(): number;
  stop(): Promise<void>;
}

/** Starts `n` holders, each on its own connection, with a floor responder on every connection. */
export async function startHolders(n: number, start: HoldersStart): Promise<Holders> {
  const procs = Array.from(
    { length: Math.ceil(n / HOLDERS_PER_PROCESS) },
    () => new BenchChild(new URL("./holder-process.ts", import.meta.url), "a holder process"),
  );
  const share = Math.ceil(n / procs.length);
  const started: unknown[] = [];
  try {
    // One process after the other: all at once, 5,000 holders opening their KV buckets time out.
    for (const [i, p] of procs.entries()) started.push(await p.call("start", { ...start, first: i * share, count: Math.min(share, n - i * share) }));
  } catch (e) {
    await Promise.all(procs.map((p) => p.stop()));
    throw e;
  }
  return {
    procs,
    started,
    generation: async () => Math.min(...(await Promise.all(procs.map((p) => p.call<number>("generation"))))),
    rss: () => procs.reduce((sum, p) => sum + p.rss(), 0),
    stop: async () => void (await Promise.all(procs.map((p) => p.stop()))),
  };
}

/** Waits for `p`, failing with `what()` (said when it fails) after `ms`. */
async function within(p: Promise<void>, ms: number, what: () => string): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(what())), ms)));
  try {
    await Promise.race([p, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** Where one floor message goes: the subject its responders listen on, how many there are, and the subject (a prefix) they answer on. */
export interface FloorTarget {
  subject: string;
  responders: number;
  /** Each round's answers go to `<replyTo>.<round>`: a subject the responders' identity may publish to. */
  replyTo: string;
}

/**
 * The floor, as core NATS: one message to each target (one for holders that share a subject),
 * answered by every responder, timed until all answered. The message names the subject to
 * answer on in its body, not as its reply subject: an identity without the response permission
 * (a part's) may answer only on subjects its permissions allow, its own holder stream's ack
 * subjects (one that no consumer has), and the server refuses any client a reply subject under
 * `$JS.ACK.`. So the figure counts the server's permission checks of the answers too. The
 * answers come on subscriptions made once, so a round costs only its messages.
 */
export class Floor {
  private round = 0;
  private got = 0;
  private done: (() => void) | undefined;
  private readonly subs: Array<{ unsubscribe(): void }>;
  private readonly total: number;

  constructor(
    private readonly nc: NatsConnection,
    private readonly targets: readonly FloorTarget[],
  ) {
    this.total = targets.reduce((t, x) => t + x.responders, 0);
    this.subs = [...new Set(targets.map((t) => t.replyTo))].map((r) =>
      nc.subscribe(`${r}.*`, {
        callback: (_e, m) => {
          if (m.subject.endsWith(`.${this.round}`) && ++this.got === this.total) this.done?.();
        },
      }),
    );
  }

  /** The responders there are. */
  get responders(): number {
    return this.total;
  }

  /** One round, in ms. */
  async once(): Promise<number> {
    await this.nc.flush();
    this.round++;
    this.got = 0;
    const all = new Promise<void>((resolve) => (this.done = resolve));
    const t0 = performance.now();
    for (const t of this.targets) this.nc.publish(t.subject, `${t.replyTo}.${this.round}`);
    await within(all, 30_000, () => `floor: ${this.got}/${this.total} replies within 30 s`);
    return performance.now() - t0;
  }

  stop(): void {
    for (const s of this.subs) s.unsubscribe();
  }
}

/**
 * The bare JetStream floor: the rotation's own shape with no mesh code. One stream made as a
 * holder stream is (holderStreamConfig), one consumer per holder made as a holder's is
 * (holderConsumerConfig: explicit ack, one pending, every ack sampled, in memory on one server,
 * R3 on file on a cluster), each pulled from on a holder's own connection as the SDK pulls
 * (holder-process.ts: one message per pull) and acknowledged as it arrives. A round
 * publishes one message (with a message id, as a broadcast is) and is timed until the server's
 * ack metrics (`$JS.EVENT.METRIC.CONSUMER.ACK.<stream>.<consumer>`, what the rotator counts)
 * have named every consumer at that sequence or later. What it leaves out, by design, is the
 * mesh: the rotate request, the rotation record's writes, the consumers made sure of before the
 * broadcast, the holders' parsing and decrypting of the values, and the commit.
 *
 * The rotator (in the benchmark's process) hears these metrics too, as it hears every consumer
 * ack, and drops them by their stream's name: a cost the floor carries, which the mesh's
 * rotations do not (the bare consumers are idle while a rotation runs).
 */
export class BareFloor {
  static readonly STREAM = "BENCH_BARE";
  static readonly CONSUMER_PREFIX = "h";
  private round = 0;
  private want = Infinity;
  private readonly acked = new Set<string>();
  /** The last sequence acknowledged on each consumer, for acks that come before the publish's own answer. */
  private readonly lastSeq = new Map<string, number>();
  private done: (() => void) | undefined;
  private readonly sub: { unsubscribe(): void };
  private readonly subject: string;
  /** A message of a broadcast's size (a part's broadcast with its sealed values: about 600 bytes). */
  private readonly payload = JSON.stringify({ pad: "x".repeat(560) });

  private constructor(
    private readonly nc: NatsConnection,
    private readonly js: JetStreamClient,
    private readonly jsm: JetStreamManager,
    private readonly n: number,
    /** How long making the stream and its n consumers took, in ms. */
    readonly madeInMs: number,
  ) {
    this.subject = BareFloor.endpoint(0).subject;
    this.sub = nc.subscribe(`$JS.EVENT.METRIC.CONSUMER.ACK.${BareFloor.STREAM}.*`, {
      callback: (_e, m) => {
        let seq: unknown;
        try {
          seq = (m.json() as { stream_seq?: unknown }).stream_seq;
        } catch {
          return;
        }
        if (typeof seq !== "number") return;
        const consumer = m.subject.slice(m.subject.lastIndexOf(".") + 1);
        this.lastSeq.set(consumer, seq);
        this.count(consumer, seq);
      },
    });
  }

  /** Where holder i's consumer is: the stream, its consumer and the subject of the round's message. */
  private static endpoint(i: number): HolderEndpoint {
    return { stream: BareFloor.STREAM, consumer: `${BareFloor.CONSUMER_PREFIX}${i}`, subject: "bench.bare.key", streamSubjects: "bench.bare.>", sdk: true };
  }

  /** Makes the stream and `n` consumers (`replicas` each, as the mesh would make them), 64 at a time as the rotator does. */
  static async open(nc: NatsConnection, js: JetStreamClient, jsm: JetStreamManager, n: number, replicas: number): Promise<BareFloor> {
    const t0 = performance.now();
    await jsm.streams.delete(BareFloor.STREAM).catch(() => undefined);
    await jsm.streams.add(holderStreamConfig(BareFloor.endpoint(0), replicas));
    let next = 0;
    await Promise.all(
      Array.from({ length: 64 }, async () => {
        for (let i = next++; i < n; i = next++) await jsm.consumers.add(BareFloor.STREAM, holderConsumerConfig(BareFloor.endpoint(i), replicas));
      }),
    );
    return new BareFloor(nc, js, jsm, n, performance.now() - t0);
  }

  private count(consumer: string, seq: number): void {
    if (seq < this.want || this.acked.has(consumer)) return;
    this.acked.add(consumer);
    if (this.acked.size === this.n) this.done?.();
  }

  /** One round, in ms: one message published, until every consumer's ack of it was heard. */
  async once(): Promise<number> {
    await this.nc.flush();
    this.round++;
    this.acked.clear();
    this.want = Infinity;
    const all = new Promise<void>((resolve) => (this.done = resolve));
    const t0 = performance.now();
    const ack = await this.js.publish(this.subject, this.payload, { msgID: `bare-${process.pid}-${this.round}` });
    this.want = ack.seq;
    for (const [consumer, seq] of this.lastSeq) this.count(consumer, seq);
    await within(all, 60_000, () => `bare JetStream floor: ${this.acked.size}/${this.n} acks within 60 s`);
    return performance.now() - t0;
  }

  async stop(): Promise<void> {
    this.sub.unsubscribe();
    await this.jsm.streams.delete(BareFloor.STREAM).catch(() => undefined);
  }
}

/**
 * The commits of one grant's rotations, as a KV watch of its record sees them: opened once per
 * grant, so each round costs the process under measurement only the record writes it receives
 * (not a new watch and a read of the whole record).
 */
export class CommitWatch {
  /** The generation of the last committed rotation seen. */
  private committedTo = 0;
  private waiter: { after: number; resolve(v: { at: number; record: Rotation }): void } | undefined;
  private constructor(
    /** The grant, `<module>/<requirement>`. */
    readonly grant: string,
    private readonly w: Awaited<ReturnType<KV["watch"]>>,
  ) {
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

  /** Watches grant module/req in bucket `rotations` (the store's `kv.rotations`). */
  static async open(rotations: KV, module: string, req: string): Promise<CommitWatch> {
    const key = keys.grant(module, req);
    const cw = new CommitWatch(`${module}/${req}`, await rotations.watch({ key }));
    // What is committed already (the watch's first value may not have arrived yet).
    cw.committedTo = Math.max(cw.committedTo, (await readJson(rotations, key, Rotation))?.value.to ?? 0);
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

/**
 * One rotation of each grant `commits` watch, all requested at once on `nc`: from the first
 * rotate request until a watch has seen the last of them `Committed` (not by polling).
 */
export async function rotateOnce(nc: NatsConnection, commits: readonly CommitWatch[]): Promise<number> {
  const t0 = performance.now();
  const t0wall = Date.now();
  const ats = await Promise.all(
    commits.map(async (c) => {
      const seen = c.next(300_000);
      // With a request id, as meshctl sends it: a request the rotator retries inside (a cluster's JetStream gap) starts one rotation, not two.
      const m = await nc.request(subjects.rotate, JSON.stringify({ grant: c.grant, requestId: randomUUID() }), { timeout: 60_000 });
      const reply = m.json() as { ok: boolean; error?: { message: string } };
      if (!reply.ok) throw new Error(`rotate ${c.grant} refused: ${reply.error?.message}`);
      const { at, record } = await seen;
      if (process.env.BENCH_PHASES) printPhases(Rotation.parse(record), t0wall);
      return at;
    }),
  );
  return Math.max(...ats) - t0;
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

/** CPU spent, in ms, by this (the rotator's) process, the holders' processes, the other services and nats-server. */
export interface CpuSpent {
  rotator: number;
  holders: number;
  services: number;
  server: number;
}

/** The processes whose CPU is counted, besides this one. */
export interface CpuPids {
  holders: readonly number[];
  services: readonly number[];
  server: readonly number[];
}

const cpuOfAll = (pids: readonly number[]) => pids.reduce((t, pid) => t + cpuOf(pid), 0);

/** Adds the CPU each process spent while `f` runs into `into`. */
async function cpuDuring<T>(pids: CpuPids, into: CpuSpent, f: () => Promise<T>): Promise<T> {
  const [r0, h0, s0, n0] = [process.cpuUsage(), cpuOfAll(pids.holders), cpuOfAll(pids.services), cpuOfAll(pids.server)];
  const value = await f();
  const r = process.cpuUsage(r0);
  into.rotator += (r.user + r.system) / 1000;
  into.holders += cpuOfAll(pids.holders) - h0;
  into.services += cpuOfAll(pids.services) - s0;
  into.server += cpuOfAll(pids.server) - n0;
  return value;
}

/** Samples the peak resident memory of this (the rotator's) process and of the holders' processes while `f` runs. */
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
 * With `BENCH_PROFILE_DIR` set, starts CPU profiles of this process and of the holders'
 * processes; the function returned writes them to `<dir>/rotator-<label>.cpuprofile` and
 * `<dir>/holders-<label>-<i>.cpuprofile`. Without it, does nothing.
 */
async function startProfiles(label: string, procs: readonly BenchChild[]): Promise<() => Promise<void>> {
  if (!process.env.BENCH_PROFILE_DIR) return async () => undefined;
  const stop = await startProfile();
  await Promise.all(procs.map((p) => p.call("profile")));
  return async () => {
    writeProfile(`rotator-${label}`, await stop());
    await Promise.all(procs.map(async (p, i) => writeProfile(`holders-${label}-${i}`, await p.call<string>("profile"))));
  };
}

/** What the rounds of one size measured. */
export interface Rounds {
  runs: number;
  times: number[];
  floors: number[];
  /** The bare JetStream floor's rounds; empty when it was not measured. */
  bares: number[];
  /** The first round of each, timed but not counted (warm-up: the code paths). */
  first: { rotation: number; floor: number; bare?: number };
  floorCpu: CpuSpent;
  bareCpu: CpuSpent;
  rotationCpu: CpuSpent;
  /** Peak RSS of this process and of the holders' processes (summed) during the rounds. */
  rotatorRss: number;
  holdersRss: number;
}

/**
 * One round of `floor`, of `bare` (when given) and of `rotate` not counted, then `runs` rounds
 * of each, interleaved so all see the same load of the machine; the holders run in `procs`
 * (their CPU and memory counted as the holders'), profiled under `BENCH_PROFILE_DIR` as `label`
 * (the rotations' rounds and the floors' alike).
 */
export async function measureRounds(o: {
  label: string;
  runs: number;
  floor: () => Promise<number>;
  /** The bare JetStream floor ({@link BareFloor}). */
  bare?: () => Promise<number>;
  rotate: () => Promise<number>;
  procs: readonly BenchChild[];
  pids: Omit<CpuPids, "holders">;
}): Promise<Rounds> {
  global.gc?.();
  const pids: CpuPids = { ...o.pids, holders: o.procs.map((p) => p.pid) };
  const zero = (): CpuSpent => ({ rotator: 0, holders: 0, services: 0, server: 0 });
  const r: Omit<Rounds, "rotatorRss" | "holdersRss"> = {
    runs: o.runs,
    times: [],
    floors: [],
    bares: [],
    first: { rotation: 0, floor: 0 },
    floorCpu: zero(),
    bareCpu: zero(),
    rotationCpu: zero(),
  };
  const peaks = await peaksDuring(
    () => o.procs.reduce((t, p) => t + p.rss(), 0),
    async () => {
      const bare = o.bare;
      r.first = { floor: await o.floor(), ...(bare ? { bare: await bare() } : {}), rotation: await o.rotate() };
      const stopProfiles = await startProfiles(o.label, o.procs);
      for (let i = 0; i < o.runs; i++) {
        r.floors.push(await cpuDuring(pids, r.floorCpu, o.floor));
        if (bare) r.bares.push(await cpuDuring(pids, r.bareCpu, bare));
        r.times.push(await cpuDuring(pids, r.rotationCpu, o.rotate));
      }
      await stopProfiles();
    },
  );
  return { ...r, rotatorRss: peaks.rotator, holdersRss: peaks.holders };
}

/** The holder streams (MESH_HOLD_…) and their consumers. */
async function countHolderStreams(jsm: JetStreamManager): Promise<{ streams: number; consumers: number }> {
  let streams = 0;
  let consumers = 0;
  for await (const si of jsm.streams.list()) {
    if (!si.config.name.startsWith(HOLDER_STREAM_PREFIX)) continue;
    streams++;
    consumers += si.state.consumer_count;
  }
  return { streams, consumers };
}

/** The column header of {@link printRounds}'s rows; `holders` names what holds (and so whose processes' memory is shown). */
export function roundsHeader(holders: string): string {
  return `${holders} | rotate→Committed p50 / p99 (runs) | core floor p50 / p99 (1 request, N responders on the holders' connections) | ratio p50 | bare JetStream floor p50 / p99 (1 publish, N consumers acking) | ratio p50 | memory: holders' processes' RSS (count), rotator process peak RSS, nats-server RSS`;
}

/** Prints one size's row (figures, ratio to the floor, memory), the CPU per round, what the server holds, and the uncounted first round. */
export async function printRounds(n: number, r: Rounds, o: { jsm: JetStreamManager; serverPids: readonly number[]; processes: number }): Promise<void> {
  const serverRss = o.serverPids.reduce<number | undefined>((t, pid) => (t === undefined ? undefined : (rssOf(pid) ?? NaN) + t), 0);
  // What the server holds for the holders: a consumer each (in their holder streams), beside the mesh's own.
  const account = await o.jsm.getAccountInfo();
  const holderStreams = await countHolderStreams(o.jsm);
  const { times, floors, bares, runs } = r;
  const ratio = (xs: number[]) => `${(pct(times, 50) / pct(xs, 50)).toFixed(bares.length ? 2 : 1)}×`;
  const bare = bares.length ? `${ms(pct(bares, 50))} / ${ms(pct(bares, 99))} | ${ratio(bares)}` : "- | -";
  console.log(
    `${String(n).padStart(7)} | ${ms(pct(times, 50))} / ${ms(pct(times, 99))} (${runs}) | ${ms(pct(floors, 50))} / ${ms(pct(floors, 99))} | ${ratio(floors)} | ${bare} | ${mib(r.holdersRss)} (${o.processes}), ${mib(r.rotatorRss)}, ${serverRss === undefined ? "?" : mib(serverRss)}`,
  );
  const per = (c: CpuSpent) =>
    `${ms((c.rotator + c.holders + c.services + c.server) / runs)} (rotator's process ${ms(c.rotator / runs)}, holders ${ms(c.holders / runs)}, other services ${ms(c.services / runs)}, nats-server ${ms(c.server / runs)})`;
  console.log(
    `        CPU per round (10 ms ticks): core floor ${per(r.floorCpu)}; ${bares.length ? `bare JetStream floor ${per(r.bareCpu)}; ` : ""}rotation ${per(r.rotationCpu)}`,
  );
  console.log(
    `        the server holds ${account.consumers} consumers (${holderStreams.consumers} of them in ${holderStreams.streams} holder streams) in ${account.streams} streams, at ${serverRss === undefined ? "?" : mib(serverRss)} RSS`,
  );
  console.log(
    `        first round, not counted above (warm-up): rotation ${ms(r.first.rotation)}, core floor ${ms(r.first.floor)}${r.first.bare === undefined ? "" : `, bare JetStream floor ${ms(r.first.bare)}`}`,
  );
}

/**
 * One size of SDK holders, measured and printed: `n` holders of `start`'s grant (declared and
 * provisioned), the core floor answered on `replyTo`, with `bareReplicas` the bare JetStream
 * floor too (its consumers at that many replicas, pulled from on the holders' connections),
 * `runs` rounds. Answers what each holder process's `start` answered; undefined, with the row
 * saying why, when this process may not open that many connections.
 */
export async function measureSdkHolders(o: {
  n: number;
  nc: NatsConnection;
  store: Store;
  start: HoldersStart;
  replyTo: string;
  runs: number;
  label: string;
  pids: Omit<CpuPids, "holders">;
  bareReplicas?: number;
}): Promise<unknown[] | undefined> {
  const { n, nc } = o;
  const short = openFilesShort(n);
  if (short) {
    console.log(short);
    return undefined;
  }
  // Made before the holders start, so its consumers are there to be pulled from.
  const bare = o.bareReplicas === undefined ? undefined : await BareFloor.open(nc, o.store.js, o.store.jsm, n, o.bareReplicas);
  const start: HoldersStart = bare ? { ...o.start, bare: { stream: BareFloor.STREAM, consumerPrefix: BareFloor.CONSUMER_PREFIX } } : o.start;
  const commits = await CommitWatch.open(o.store.kv.rotations, start.module, start.requirement);
  const h = await startHolders(n, start).catch(async (e: unknown) => {
    commits.stop();
    await bare?.stop();
    throw e;
  });
  const floor = new Floor(nc, [{ subject: start.floorSubject, responders: n, replyTo: o.replyTo }]);
  try {
    // Joining: every holder registered (each holdCredential resolved), a rotation requested at
    // once, timed until it commits: the consumers the registrations asked for are made on the way.
    const joined = await rotateOnce(nc, [commits]);
    await waitUntil("holders on the grant's generation", async () => (await h.generation()) >= 2, 120_000, 20);
    const rounds = await measureRounds({
      label: o.label,
      runs: o.runs,
      floor: () => floor.once(),
      ...(bare ? { bare: () => bare.once() } : {}),
      rotate: () => rotateOnce(nc, [commits]),
      procs: h.procs,
      pids: o.pids,
    });
    await printRounds(n, rounds, { jsm: o.store.jsm, serverPids: o.pids.server, processes: h.procs.length });
    console.log(
      `        joining: from the last of ${n} registrations to the commit of a rotation requested at once ${ms(joined)}${bare ? `; the bare floor's stream and ${n} consumers (R${o.bareReplicas}) were made in ${ms(bare.madeInMs)}, 64 requests at a time (ratio ${(joined / bare.madeInMs).toFixed(2)}×)` : ""}`,
    );
    return h.started;
  } finally {
    floor.stop();
    commits.stop();
    await h.stop();
    await bare?.stop();
  }
}
