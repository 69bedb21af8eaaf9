/**
 * Rotation fan-out: time from `rotate` to `Committed` for a `secret` grant held by 10, 100,
 * 1,000 and 5,000 SDK holders (each on its own NATS connection), beside the raw floor measured
 * in the same run on the same connections: one NATS request answered by the same number of
 * plain responders (no mesh logic). Then one `postgres.database` rotation with 100 holders that
 * each prove the new credential by logging in, beside the bare cost of those 100 logins.
 * Prints figures; asserts nothing. `BENCH_SIZES=10,100` narrows the sizes (`BENCH_SIZES=` with
 * nothing skips them, `BENCH_PG=0` skips the PostgreSQL run); `BENCH_PHASES=1` prints, per
 * rotation, when each state was entered and when holders received, applied and confirmed.
 * 5,000 holders need about 10,300 open files (both ends of each connection live on this
 * machine): bench/run.mjs raises the soft limit to the hard one; this file says when it is short.
 */
import { readFileSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { Kinds, Rotation, RotationStates, connectNats, createLogger, keys, openStore, parseMasterKey, readJson, subjects, type ModuleDoc, type Store } from "@mesh/shared";
import { createAdapter } from "@mesh/providers";
import { holdCredential, type CredentialHolder } from "@mesh/client";
import { startResolver } from "@mesh/resolver";
import { startProvisioner } from "@mesh/provisioner";
import { startRotator } from "@mesh/rotator";
import { startNatsServer } from "../test/harness/nats-server.js";
import { startPostgres } from "../test/harness/postgres.js";

const sizes = (process.env.BENCH_SIZES ?? "10,100,1000,5000").split(",").filter(Boolean).map(Number);
const withPg = process.env.BENCH_PG !== "0";
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

const nats = await startNatsServer();
const log = createLogger("bench", { level: "error" });
const nc = await connectNats(nats.url);
const store = await openStore(nc);
const masterKey = parseMasterKey(randomBytes(32).toString("hex"));
const ADMIN_ENV = "MESH_BENCH_PG_ADMIN_PASSWORD";
// Room for the holders' logins beside the provisioner's and the rotator's admin pools (the harness's default is 40).
const pgServer = withPg ? await startPostgres({ maxConnections: 150 }) : undefined;
const env = { ...process.env, [ADMIN_ENV]: pgServer?.adminPassword ?? "" };
const resolver = await startResolver({ store, log });
const provisioner = await startProvisioner({ store, masterKey, log, env });
const rotator = await startRotator({ store, masterKey, log, env, sweepMs: 1_000 });

async function apply(docs: unknown[]) {
  const m = await nc.request(subjects.apply, JSON.stringify({ documents: docs }), { timeout: 10_000 });
  if (!(m.json() as { ok: boolean }).ok) throw new Error(`apply failed: ${m.string()}`);
}

async function rotationOf(store: Store, module: string, req: string) {
  return (await readJson(store.kv.rotations, keys.grant(module, req), Rotation))?.value;
}

/** Runs holders of module/part/req, each on its own connection; `prove` runs before each confirm. */
async function startHolders(n: number, module: string, req: string, prove?: (values: Record<string, string>) => Promise<void>) {
  const conns: NatsConnection[] = [];
  for (let i = 0; i < n; i += 200) {
    conns.push(...(await Promise.all(Array.from({ length: Math.min(200, n - i) }, () => connect({ servers: nats.url, maxReconnectAttempts: -1 })))));
  }
  const holders: CredentialHolder[] = [];
  const generations: number[] = new Array(n).fill(0);
  for (let i = 0; i < n; i += 200) {
    holders.push(
      ...(await Promise.all(
        conns.slice(i, i + 200).map((c, j) => holdCredential(c, { module, part: "app", requirement: req, node: "n1", instance: `h${i + j}`, fetchTimeoutMs: 20_000 })),
      )),
    );
  }
  holders.forEach((h, i) =>
    void (async () => {
      for await (const u of h) {
        if (u.rotation && prove) await prove(u.values);
        generations[i] = u.generation;
        if (u.rotation) await u.confirm();
      }
    })(),
  );
  return { conns, holders, generations };
}

/** The floor: one request answered by `n` plain responders on those connections, until all replied. */
async function floor(conns: NatsConnection[], runs = 5): Promise<number[]> {
  const subs = conns.map((c) => c.subscribe("bench.floor", { callback: (_e, m) => void m.respond("ok") }));
  await Promise.all(conns.map((c) => c.flush()));
  const out: number[] = [];
  for (let r = 0; r < runs; r++) {
    const t0 = performance.now();
    let got = 0;
    for await (const _ of await nc.requestMany("bench.floor", "", { strategy: "count", maxMessages: conns.length, maxWait: 30_000 })) got++;
    if (got !== conns.length) throw new Error(`floor: ${got}/${conns.length} replies`);
    out.push(performance.now() - t0);
  }
  subs.forEach((s) => s.unsubscribe());
  return out;
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
function rssOf(pid: number): number | undefined {
  try {
    const m = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return m ? Number(m[1]) * 1024 : undefined;
  } catch {
    return undefined;
  }
}

/** Prints when each state was entered and the holders' received/applied/confirmed spread (ms after the request). */
function printPhases(r: Rotation, t0wall: number) {
  const start = Date.parse(r.requestedAt);
  const at = (s: string) => {
    const x = r.history.find((e) => e.state === s);
    return x ? `${Date.parse(x.at) - start}` : "-";
  };
  const hs = Object.values(r.holders);
  const spread = (k: "r" | "a" | "c") => {
    const xs = hs.map((p) => p[k]).filter((x): x is number => x !== undefined);
    return xs.length ? `${pct(xs, 1)}/${pct(xs, 50)}/${pct(xs, 100)}` : "-";
  };
  console.log(
    `        request→Staged ${start - t0wall} ms, then Broadcast +${at("Broadcast")}, AwaitingHolders +${at("AwaitingHolders")}, Committed +${at("Committed")} | holders (min/p50/max ms): received ${spread("r")}, applied ${spread("a")}, confirmed ${spread("c")}`,
  );
}

/** One rotation of module/req: from the rotate request until the record says `Committed` (seen by a watch, not by polling). */
async function rotateOnce(module: string, req: string): Promise<number> {
  const key = keys.grant(module, req);
  const before = (await rotationOf(store, module, req))?.to;
  const w = await store.kv.rotations.watch({ key });
  let committed: Rotation | undefined;
  const seen = (async () => {
    for await (const e of w) {
      if (e.operation !== "PUT" || !e.length) continue;
      const r = e.json() as Rotation;
      if (r.to !== before && r.state === RotationStates.Committed) {
        committed = r;
        return performance.now();
      }
    }
    throw new Error("the watch of the rotation ended before the commit");
  })();
  const t0 = performance.now();
  const t0wall = Date.now();
  const m = await nc.request(subjects.rotate, JSON.stringify({ grant: `${module}/${req}` }), { timeout: 60_000 });
  const reply = m.json() as { ok: boolean; error?: { message: string } };
  if (!reply.ok) throw new Error(`rotate refused: ${reply.error?.message}`);
  let timer: NodeJS.Timeout | undefined;
  const t1 = await Promise.race([seen, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error("no commit within 300 s")), 300_000)))]);
  clearTimeout(timer);
  w.stop();
  if (process.env.BENCH_PHASES) printPhases(Rotation.parse(committed), t0wall);
  return t1 - t0;
}

const fdLimit = openFilesLimit();
console.log("rotation fan-out, secret grant, SDK holders each on its own NATS connection (holders, services and the floor's responders all in this process)");
console.log("holders | rotate→Committed p50 / p99 (runs) | floor p50 / p99 (1 request, N responders, same connections) | ratio p50 | memory: holders' RSS, peak RSS, nats-server RSS");
for (const n of sizes) {
  if (fdLimit !== undefined && fdLimit < 2 * n + 300) {
    console.log(`${String(n).padStart(7)} | skipped: ${n} connections need about ${2 * n + 300} open files, the limit is ${fdLimit} (raise it: ulimit -n ${2 * n + 300})`);
    continue;
  }
  const module = `fan${n}`;
  await apply([{ kind: "Module", name: module, parts: [{ name: "app", node: "n1", installed: true }], requires: [{ name: "key", kind: Kinds.Secret }] } satisfies Partial<ModuleDoc>]);
  await waitUntil("grant provisioned", async () => ((await readJson(store.kv.grants, keys.grant(module, "key"), (await import("@mesh/shared")).Grant))?.value.generation ?? 0) >= 1);
  global.gc?.();
  const rss0 = process.memoryUsage().rss;
  const h = await startHolders(n, module, "key");
  await waitUntil("holders on generation 1", () => h.generations.every((g) => g >= 1));
  const rss1 = process.memoryUsage().rss;
  let peak = rss1;
  const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 20);
  const runs = n >= 5000 ? 3 : 5;
  const times: number[] = [];
  for (let r = 0; r < runs; r++) times.push(await rotateOnce(module, "key"));
  clearInterval(sampler);
  const serverRss = rssOf(nats.pid);
  const fl = await floor(h.conns, runs);
  console.log(
    `${String(n).padStart(7)} | ${ms(pct(times, 50))} / ${ms(pct(times, 99))} (${runs}) | ${ms(pct(fl, 50))} / ${ms(pct(fl, 99))} | ${(pct(times, 50) / pct(fl, 50)).toFixed(1)}× | ${mib(rss1 - rss0)}, ${mib(peak)}, ${serverRss === undefined ? "?" : mib(serverRss)}`,
  );
  await Promise.all(h.holders.map((x) => x.stop()));
  await Promise.all(h.conns.map((c) => c.close()));
}

if (pgServer) {
  const n = 100;
  await apply([
    { kind: "Provider", name: "pg-bench", serves: [Kinds.PostgresDatabase], node: "n1", endpoint: pgServer.endpoint, admin: { username: pgServer.adminUser, passwordEnv: ADMIN_ENV } },
    { kind: "Module", name: "pgfan", parts: [{ name: "app", node: "n1" }], requires: [{ name: "db", kind: Kinds.PostgresDatabase }] },
  ]);
  await waitUntil("pg grant provisioned", async () => ((await readJson(store.kv.grants, keys.grant("pgfan", "db"), (await import("@mesh/shared")).Grant))?.value.generation ?? 0) >= 1);
  const adapter = createAdapter(Kinds.PostgresDatabase, { name: "pg-bench", node: "n1", endpoint: pgServer.endpoint });
  // At most 40 logins at once, for holders and baseline alike: a SCRAM login costs this machine
  // about 40 ms of CPU, so 100 at once take ~3.6 s, past the adapter's 3 s login timeout. The
  // server allows 150 connections, so 40 logins fit beside the provisioner's and the rotator's
  // admin pools (at 40, as before, they did not: "sorry, too many clients already").
  let active = 0;
  const waiting: Array<() => void> = [];
  const prove = async (values: Record<string, string>) => {
    while (active >= 40) await new Promise<void>((r) => waiting.push(r));
    active++;
    try {
      const r = await adapter.login({ bindings: values });
      if (!r.ok) throw new Error(r.message);
    } finally {
      active--;
      waiting.shift()?.();
    }
  };
  const h = await startHolders(n, "pgfan", "db", prove);
  await waitUntil("pg holders on generation 1", () => h.generations.every((g) => g >= 1));
  const times: number[] = [];
  for (let r = 0; r < 3; r++) times.push(await rotateOnce("pgfan", "db"));
  // Baseline: the same 100 logins, bare, at once.
  const { CredentialStore } = await import("@mesh/providers");
  const cur = (await readJson(store.kv.grants, keys.grant("pgfan", "db"), (await import("@mesh/shared")).Grant))!.value.generation;
  const values = (await new CredentialStore(store.kv.credentials, masterKey).read("pgfan", "db", cur))!.bindings!;
  const bare: number[] = [];
  for (let r = 0; r < 3; r++) {
    const t0 = performance.now();
    await Promise.all(Array.from({ length: n }, () => prove(values)));
    bare.push(performance.now() - t0);
  }
  console.log(`\npostgres.database, ${n} SDK holders each logging in with the new credential before confirming (at most 40 logins at once)`);
  console.log(
    `rotate→Committed p50 ${ms(pct(times, 50))}, p99 ${ms(pct(times, 99))} (3 runs) | baseline, the same ${n} logins bare (same limit): p50 ${ms(pct(bare, 50))}, p99 ${ms(pct(bare, 99))} | ratio p50 ${(pct(times, 50) / pct(bare, 50)).toFixed(1)}×`,
  );
  await Promise.all(h.holders.map((x) => x.stop()));
  await Promise.all(h.conns.map((c) => c.close()));
  await adapter.close();
}

await rotator.stop();
await provisioner.stop();
await resolver.stop();
await nc.close();
await nats.stop();
await pgServer?.stop();
process.exit(0);
