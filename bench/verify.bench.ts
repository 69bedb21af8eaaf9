/**
 * Verification throughput and drift-detection latency: 1,000 `postgres.database` grants, one
 * verifier, one PostgreSQL (the test harness's, scram-sha-256), one nats-server.
 *
 * Baseline, measured in the same run: the bare cost of the logins a verifier pass performs —
 * one plain `pg` login (connect, `select 1`, end) with each grant's own delivered values, at the
 * verifier's concurrency. A check is more than a login (an observe through the admin pool, KV
 * reads and a record write), so the ratio says what the mesh adds on top of the logins.
 *
 * Drift: with the verifier at its default interval (10 s, jittered), the passwords of 50 grants
 * are changed with ALTER ROLE behind its back; the latency is from each change to the grant's
 * `Verified` condition turning CredentialRejected (and, as repair is `auto`, to Verified again).
 *
 * Setup, not measured: each grant's group role and database are made with CREATE DATABASE …
 * STRATEGY FILE_COPY (several times faster here than the default WAL_LOG copy of the template),
 * then the real adapter's `create` and the credential store do what the provisioner does, and
 * each database is logged into once (a database's first connection is slower, and holders
 * have connected long before a re-check). Nothing here asserts a time.
 */
import { randomBytes } from "node:crypto";
import { statfsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Writable } from "node:stream";
import pg from "pg";
import {
  Buckets,
  Grant,
  connectNats,
  createLogger,
  getCondition,
  grantId,
  holderKey,
  keys,
  kvStream,
  openStore,
  parseMasterKey,
  readJson,
  requestJson,
  setCondition,
  subjects,
  type Condition,
  type ProviderDoc,
} from "@mesh/shared";
import { AdapterPool, CredentialStore, postgresNames, providerConfig } from "@mesh/providers";
import { startVerifier } from "@mesh/verifier";
import { startNatsServer } from "../test/harness/nats-server.js";
import { startPostgres } from "../test/harness/postgres.js";
import { startProfile } from "./profile.js";

const GRANTS = Number(process.env.BENCH_GRANTS ?? 1_000);
const DRIFTED = Math.min(50, GRANTS);
const CONCURRENCY = 16; // the verifier's default
const ADMIN_ENV = "BENCH_PG_ADMIN_PASSWORD";
/** How long the steady state is watched. */
const STEADY_MS = 6_000;

const ms = (n: number) => `${n.toFixed(0)} ms`;
const s = (n: number) => `${(n / 1000).toFixed(1)} s`;
function pct(values: number[], p: number): number {
  const v = [...values].sort((a, b) => a - b);
  return v[Math.min(v.length - 1, Math.max(0, Math.ceil((p / 100) * v.length) - 1))] ?? NaN;
}
async function eachLimited<T>(items: readonly T[], limit: number, fn: (item: T, i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(limit, items.length) }, async () => {
      while (next < items.length) {
        const i = next++;
        await fn(items[i]!, i);
      }
    }),
  );
}
const sleep = (t: number) => new Promise((r) => setTimeout(r, t));
const line = (label: string, value: string) => console.log(`  ${label.padEnd(44)} ${value}`);

// 1,000 databases are about 7.5 GB of catalog copies: on a tmpfs when one has room, they are
// made and removed in a fraction of the time (the harness makes its directories under TMPDIR).
const shm = (() => {
  try {
    const f = statfsSync("/dev/shm");
    return f.bavail * f.bsize > 16 * 2 ** 30 ? "/dev/shm" : undefined;
  } catch {
    return undefined;
  }
})();
if (shm && !process.env.TMPDIR) process.env.TMPDIR = shm;
const phase = (name: string, since: number) => console.log(`  [${name}: ${s(Date.now() - since)}]`);

const t0 = Date.now();
const nats = await startNatsServer();
const db = await startPostgres();
const nc = await connectNats(nats.url);
const store = await openStore(nc);
const env = { ...process.env, [ADMIN_ENV]: db.adminPassword };
const masterKey = parseMasterKey(randomBytes(32).toString("hex"));
const providerDoc: ProviderDoc = {
  kind: "Provider",
  name: "pg-bench",
  serves: ["postgres.database"],
  node: "node-a",
  endpoint: db.endpoint,
  admin: { username: db.adminUser, passwordEnv: ADMIN_ENV },
  installed: true,
};
await store.kv.providers.put(providerDoc.name, JSON.stringify(providerDoc));

try {
  // ---- setup: 1,000 provisioned grants, as the provisioner leaves them ----
  const modules = Array.from({ length: GRANTS }, (_, i) => `bench-${String(i).padStart(4, "0")}`);
  const admin = new pg.Pool({ host: db.host, port: db.port, user: db.adminUser, password: db.adminPassword, database: "postgres", max: 4 });
  await eachLimited(modules, 4, async (m) => {
    const n = postgresNames(m, "db");
    await admin.query(`CREATE ROLE "${n.group}" NOLOGIN`);
    await admin.query(`COMMENT ON ROLE "${n.group}" IS 'mesh grant ${m}/db'`);
    await admin.query(`CREATE DATABASE "${n.database}" OWNER "${n.group}" STRATEGY FILE_COPY`);
  });
  const credentials = new CredentialStore(store.kv.credentials, masterKey);
  const pool = new AdapterPool(env);
  const adapter = pool.get("postgres.database", providerDoc);
  const bindings = new Map<string, Record<string, string>>();
  const now = new Date().toISOString();
  await eachLimited(modules, 8, async (m) => {
    const grant = { module: m, requirement: "db", id: grantId(m, "db") };
    const secret = await credentials.ensure(grant, 1, providerDoc.name, () => adapter.generate());
    const r = await adapter.create({ grant: { module: m, requirement: "db", generation: 1 }, secret });
    await credentials.setBindings(m, "db", 1, r.bindings);
    bindings.set(m, r.bindings);
    let conditions: Condition[] = [];
    conditions = setCondition(conditions, { type: "Resolved", status: "True", reason: "ProviderSelected", message: `provider ${providerDoc.name} (node node-a)` });
    conditions = setCondition(conditions, { type: "Provisioned", status: "True", reason: "Provisioned", message: `generation 1 on ${providerDoc.name}` });
    conditions = setCondition(conditions, { type: "Delivered", status: "True", reason: "Delivered", message: "generation 1 delivered to api@node-a" });
    const g: Grant = {
      id: grant.id,
      module: m,
      requirement: "db",
      kind: "postgres.database",
      parts: ["api"],
      targets: [{ part: "api", node: "node-a" }],
      provider: providerDoc.name,
      generation: 1,
      resource: { ...r.resource, provider: providerDoc.name },
      holders: { [holderKey("node-a", "api")]: { generation: 1, deliveredAt: now } },
      conditions,
    };
    await store.kv.grants.put(keys.grant(m, "db"), JSON.stringify(g));
  });
  await pool.close();
  // Each database's first connection builds its catalog caches (measured here: ~30 % slower
  // than later ones); holders have long connected by the time a verifier re-checks, so both the
  // baseline and the verifier measure warm logins.
  const login = async (b: Record<string, string>) => {
    const c = new pg.Client({ host: b.host, port: Number(b.port), user: b.username, password: b.password, database: b.database });
    await c.connect();
    await c.query("select 1");
    await c.end();
  };
  await eachLimited([...bindings.values()], CONCURRENCY, login);
  console.log(`setup: ${GRANTS} provisioned postgres.database grants (each logged into once) in ${s(Date.now() - t0)} (PostgreSQL ${db.port} with its data under ${process.env.TMPDIR ?? "the default temporary directory"}, NATS ${nats.port})`);

  // ---- baseline: the bare logins of one pass, same concurrency ----
  const logins = [...bindings.values()];
  const tb = performance.now();
  await eachLimited(logins, CONCURRENCY, login);
  const baselineMs = performance.now() - tb;
  const baselineRate = (GRANTS / baselineMs) * 1000;

  // ---- throughput: the verifier's first pass over every grant ----
  const sink = new Writable({ write: (_c, _e, cb) => cb() });
  const verifier = await startVerifier({ store, masterKey, log: createLogger("verifier", { destination: sink, level: "info" }), env, concurrency: CONCURRENCY });
  const stopProfile = process.env.BENCH_PROFILE_DIR ? await startProfile() : undefined;
  const tp = performance.now();
  const rss0 = process.memoryUsage().rss;
  // The pass is over when every grant's Verified condition has been written once.
  while (verifier.stats().transitions < GRANTS) await sleep(50);
  const passMs = performance.now() - tp;
  if (stopProfile) writeFileSync(join(process.env.BENCH_PROFILE_DIR!, "verifier-pass.cpuprofile"), await stopProfile());
  const passChecks = verifier.stats().checks;
  const passRate = (passChecks / passMs) * 1000;
  const rss1 = process.memoryUsage().rss;
  const verified = (await Promise.all(modules.map(async (m) => getCondition((await readJson(store.kv.grants, keys.grant(m, "db"), Grant))?.value.conditions ?? [], "Verified")))).filter(
    (c) => c?.status === "True",
  ).length;

  // ---- steady state: how often each grant is re-checked at the default interval ----
  const lastSeq = async (bucket: string) => (await store.jsm.streams.info(kvStream(bucket))).state.last_seq;
  const st0 = verifier.stats();
  const [g0, v0] = [await lastSeq(Buckets.grants), await lastSeq(Buckets.verifications)];
  const ts = performance.now();
  // A forced check (meshctl verify) while the verifier is saturated: it has its own queue.
  const forced: number[] = [];
  for (const m of modules.slice(0, 5)) {
    const tf = performance.now();
    const reply = await requestJson(nc, subjects.verify, { grant: grantId(m, "db") }, { service: "verifier", timeoutMs: 30_000 });
    if ((reply as { ok?: boolean }).ok !== true) throw new Error(`verify ${m}/db failed: ${JSON.stringify(reply)}`);
    forced.push(performance.now() - tf);
  }
  await sleep(Math.max(0, STEADY_MS - (performance.now() - ts)));
  const st1 = verifier.stats();
  const steadyMs = performance.now() - ts;
  const steadyRate = ((st1.checks - st0.checks) / steadyMs) * 1000;
  const grantWrites = (await lastSeq(Buckets.grants)) - g0;
  const recordWrites = (await lastSeq(Buckets.verifications)) - v0;

  // ---- drift: 50 passwords changed behind the verifier's back ----
  const drifted = modules.filter((_, i) => i % Math.floor(GRANTS / DRIFTED) === 0).slice(0, DRIFTED);
  const changedAt = new Map<string, number>();
  const detectedAt = new Map<string, number>();
  const repairedAt = new Map<string, number>();
  const watch = await store.kv.grants.watch({ include: "updates" });
  void (async () => {
    for await (const e of watch) {
      if (e.operation !== "PUT") continue;
      const m = e.key.slice(0, e.key.lastIndexOf("."));
      if (!changedAt.has(m)) continue;
      const c = getCondition(Grant.parse(e.json()).conditions, "Verified");
      if (c?.reason === "CredentialRejected" && !detectedAt.has(m)) detectedAt.set(m, performance.now());
      if (c?.status === "True" && detectedAt.has(m) && !repairedAt.has(m)) repairedAt.set(m, performance.now());
    }
  })();
  for (const m of drifted) {
    const role = postgresNames(m, "db").logins[0];
    await admin.query(`ALTER ROLE "${role}" PASSWORD '${randomBytes(12).toString("hex")}'`);
    changedAt.set(m, performance.now());
  }
  const deadline = performance.now() + 120_000;
  while (repairedAt.size < drifted.length && performance.now() < deadline) await sleep(100);
  watch.stop();
  const detect = drifted.filter((m) => detectedAt.has(m)).map((m) => detectedAt.get(m)! - changedAt.get(m)!);
  const repair = drifted.filter((m) => repairedAt.has(m)).map((m) => repairedAt.get(m)! - changedAt.get(m)!);
  const stats = verifier.stats();
  await verifier.stop();
  await admin.end();

  console.log(`\nverification of ${GRANTS} grants, one verifier (concurrency ${CONCURRENCY}), one PostgreSQL:`);
  line("baseline: bare logins, same concurrency", `${baselineRate.toFixed(1)} logins/s (${GRANTS} in ${s(baselineMs)})`);
  line("verifier: first full pass", `${passRate.toFixed(1)} checks/s (${passChecks} checks in ${s(passMs)}), ${verified}/${GRANTS} Verified`);
  line("ratio verifier / baseline", `${(passRate / baselineRate).toFixed(2)}  (1.00 = a check costs only its login)`);
  // The verdict is on the figure printed beside it: the steady-state pass, not the first one.
  const steadyPassMs = (GRANTS / Math.max(steadyRate, 0.001)) * 1000;
  line("steady state at the default 10 s interval", `${steadyRate.toFixed(1)} checks/s; a full pass takes ${s(steadyPassMs)} (${steadyPassMs > 10_000 ? "longer than the interval: checks queue" : "within the interval"})`);
  line("meshctl verify while saturated (5 grants)", `p50 ${ms(pct(forced, 50))}, max ${ms(Math.max(...forced))}`);
  line(`writes while nothing changed (${s(STEADY_MS)})`, `${grantWrites} grant writes, ${recordWrites} verification-record writes (${(recordWrites / (steadyMs / 1000)).toFixed(1)}/s)`);
  line("bench process RSS (verifier and harness clients)", `${(rss0 / 2 ** 20).toFixed(0)} MiB before the pass, ${(rss1 / 2 ** 20).toFixed(0)} MiB after`);
  console.log(`\ndrift detection (${DRIFTED} passwords changed with ALTER ROLE, repair: auto):`);
  line("detected (CredentialRejected)", `${detect.length}/${DRIFTED}: p50 ${ms(pct(detect, 50))}, p99 ${ms(pct(detect, 99))}, max ${ms(Math.max(...detect))}`);
  line("repaired (Verified again)", `${repair.length}/${DRIFTED}: p50 ${ms(pct(repair, 50))}, p99 ${ms(pct(repair, 99))}, max ${ms(Math.max(...repair))}`);
  line("verifier totals", `${stats.checks} checks, ${stats.skipped} skipped as fresh, ${stats.repairs} repairs, ${stats.transitions} condition writes`);
} finally {
  const tt = Date.now();
  await nc.close();
  await db.stop();
  await nats.stop();
  phase("teardown", tt);
}
