/**
 * Verification throughput, interval keeping, drift-detection latency and two verifiers
 * splitting the work: 1,000 `postgres.database` grants, one PostgreSQL (the test harness's,
 * scram-sha-256), one nats-server.
 *
 * Baseline, measured in the same run, before and after the verifier's first pass (the machine
 * is shared, so both are printed and the ratio is against their mean): the bare cost of the
 * logins a verifier pass performs — one plain `pg` login (connect, `select 1`, end) with each
 * grant's own delivered values, at the verifier's concurrency. A check is that login with the
 * current generation (no probe stands in for one here) plus KV reads and a record write, so
 * the ratio says what the mesh adds on top of the logins.
 *
 * Then, at the default interval (10 s): every check is read back from the records (each names
 * its instance and time), and each grant's gaps between checks say whether the interval is
 * kept: in the interval right after the saturated pass (the grants come due packed into the
 * seconds that pass took), and over the two intervals after it (the steady state). Kept means
 * every grant checked and no gap longer than the interval. Meanwhile the passwords of 5 % of the grants (50 of 1,000) are changed with ALTER ROLE at
 * moments spread over one interval, and the latency is from each change to the first failed
 * check of that grant on record (a new failure is recorded once a second check confirms it,
 * CONFIRM_FAILURE_MS later), beside the bound of one interval, that pause and a second. Last, a second verifier
 * joins, and over 15 s the checks of each and the grants checked twice are counted.
 * `BENCH_PROFILE_DIR=DIR` writes a CPU profile of the first pass (`verifier-pass.cpuprofile`).
 *
 * Setup, not measured: each grant's group role and database are made with CREATE DATABASE …
 * STRATEGY FILE_COPY (several times faster here than the default WAL_LOG copy of the template),
 * then the real adapter's `create` and the credential store do what the provisioner does, and
 * each database is logged into once (a database's first connection is slower, and holders
 * have connected long before a re-check). Nothing here asserts a time.
 */
import { randomBytes } from "node:crypto";
import { statfsSync } from "node:fs";
import { Writable } from "node:stream";
import pg from "pg";
import {
  Buckets,
  CONFIRM_FAILURE_MS,
  Grant,
  Verification,
  getCondition,
  grantId,
  holderKey,
  keys,
  kvStream,
  parseMasterKey,
  setCondition,
  subjects,
  type Condition,
  type ProviderDoc,
} from "@mesh/shared";
import { connectNats, openStore, readJson, requestJson } from "@mesh/shared/runtime";
import { createLogger } from "@mesh/shared/service";
import { AdapterPool, CredentialStore, postgresNames } from "@mesh/providers";
import { DEFAULT_VERIFY_INTERVAL_MS, FRESH_SHARE, startVerifier } from "@mesh/verifier";
import { startNatsServer } from "../test/harness/nats-server.js";
import { startPostgres } from "../test/harness/postgres.js";
import { startProfile, writeProfile } from "./profile.js";

const GRANTS = Number(process.env.BENCH_GRANTS ?? 1_000);
/** 5 % of the grants (50 of 1,000): each costs a failed check, a repair and a check again, on top of the schedule. */
const DRIFTED = Math.max(1, Math.floor(GRANTS / 20));
const CONCURRENCY = 16; // the verifier's default
const ADMIN_ENV = "BENCH_PG_ADMIN_PASSWORD";
/** The verifier's default interval, which the steady state is measured at. */
const INTERVAL_MS = DEFAULT_VERIFY_INTERVAL_MS;
/** How late a drift may be on record: one interval, the pause that confirms a new failure, and a second for the check itself. */
const DRIFT_BOUND_MS = INTERVAL_MS + CONFIRM_FAILURE_MS + 1_000;
/** How long the steady state is watched: two intervals, after one of transition. */
const STEADY_MS = 2 * INTERVAL_MS;
const TRANSITION_MS = INTERVAL_MS;
/** How long two verifiers are watched. */
const TWO_MS = 1.5 * INTERVAL_MS;

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
const lastSeq = async (bucket: string) => (await store.jsm.streams.info(kvStream(bucket))).state.last_seq;
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
    conditions = setCondition(conditions, {
      type: "Resolved",
      status: "True",
      reason: "ProviderSelected",
      message: `provider ${providerDoc.name} (node node-a)`,
    });
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
  console.log(
    `setup: ${GRANTS} provisioned postgres.database grants (each logged into once) in ${s(Date.now() - t0)} (PostgreSQL ${db.port} with its data under ${process.env.TMPDIR ?? "the default temporary directory"}, NATS ${nats.port})`,
  );

  // ---- baseline: the bare logins of one pass, same concurrency (before and after the pass: the machine is shared) ----
  const logins = [...bindings.values()];
  const bareRate = async () => {
    const tb = performance.now();
    await eachLimited(logins, CONCURRENCY, login);
    return (GRANTS / (performance.now() - tb)) * 1000;
  };
  const baselineBefore = await bareRate();

  // ---- every check, from the records (each names its instance and time) ----
  const checks: Array<{ key: string; by: string; at: number; ok: boolean }> = [];
  const lastAt = new Map<string, string>();
  const recordWatch = await store.kv.verifications.watch({ include: "updates" });
  void (async () => {
    for await (const e of recordWatch) {
      if (e.operation !== "PUT") continue;
      const v = Verification.parse(e.json());
      if (lastAt.get(e.key) === v.checkedAt) continue;
      lastAt.set(e.key, v.checkedAt);
      checks.push({ key: e.key, by: v.checkedBy, at: Date.parse(v.checkedAt), ok: v.verifier.ok });
    }
  })();
  /** Per grant, its checks in [from, to); and the gaps between consecutive ones, of the grants not in `leave`. */
  const gapsIn = (from: number, to: number, leave: Set<string> = new Set()) => {
    const per = new Map<string, number[]>();
    for (const c of checks) if (c.at >= from && c.at < to) per.set(c.key, [...(per.get(c.key) ?? []), c.at]);
    const gaps: number[] = [];
    for (const [key, at] of per) if (!leave.has(key)) for (let i = 1; i < at.length; i++) gaps.push(at[i]! - at[i - 1]!);
    return { per, gaps };
  };
  /**
   * Each grant's gaps that end in [from, to) (from its check before, wherever that was), and at
   * `to` the gap still open since its last check: every interval a grant went unchecked counts,
   * also one no check ended. Grants in `leave` (the drifted ones, re-checked at once after a
   * repair by design) are left out.
   */
  const intervalKept = (from: number, to: number, leave: Set<string> = new Set()) => {
    const per = new Map<string, number[]>();
    for (const c of checks) if (c.at < to && !leave.has(c.key)) per.set(c.key, [...(per.get(c.key) ?? []), c.at]);
    const gaps: number[] = [];
    let open = 0;
    for (const at of per.values()) {
      at.sort((a, b) => a - b);
      for (let i = 1; i < at.length; i++) if (at[i]! >= from) gaps.push(at[i]! - at[i - 1]!);
      if (to - at[at.length - 1]! > INTERVAL_MS) open++;
    }
    const over = gaps.filter((g) => g > INTERVAL_MS).length;
    return { gaps, over, open, never: GRANTS - leave.size - per.size, kept: over === 0 && open === 0 && per.size === GRANTS - leave.size };
  };

  // ---- throughput: the verifier's first pass over every grant ----
  const sink = new Writable({ write: (_c, _e, cb) => cb() });
  const logOf = (name: string) => createLogger(name, { destination: sink, level: "info" });
  const verifier = await startVerifier({ store, masterKey, log: logOf("verifier"), env, concurrency: CONCURRENCY, instance: "verifier-1" });
  const stopProfile = process.env.BENCH_PROFILE_DIR ? await startProfile() : undefined;
  const tp = performance.now();
  const rss0 = process.memoryUsage().rss;
  // The pass is over when every grant's Verified condition has been written once.
  while (verifier.stats().transitions < GRANTS) await sleep(50);
  const passMs = performance.now() - tp;
  if (stopProfile) writeProfile("verifier-pass", await stopProfile());
  const passChecks = verifier.stats().checks;
  const passRate = (passChecks / passMs) * 1000;
  const rss1 = process.memoryUsage().rss;
  const passEnd = Date.now();
  const verified = (
    await Promise.all(modules.map(async (m) => getCondition((await readJson(store.kv.grants, keys.grant(m, "db"), Grant))?.value.conditions ?? [], "Verified")))
  ).filter((c) => c?.status === "True").length;

  // ---- the interval after the saturated pass (its grants come due packed), then the steady state: each grant's gaps between checks, and drift ----
  await sleep(Math.max(0, passEnd + TRANSITION_MS - Date.now()));
  const transition = intervalKept(passEnd, passEnd + TRANSITION_MS);
  const st0 = verifier.stats();
  const [g0, v0] = [await lastSeq(Buckets.grants), await lastSeq(Buckets.verifications)];
  const ts = Date.now();
  // A forced check (meshctl verify) while the verifier runs its schedule: it has its own queue.
  const forced: number[] = [];
  for (const m of modules.slice(0, 5)) {
    const tf = performance.now();
    const reply = await requestJson(nc, subjects.verify, { grant: grantId(m, "db") }, { service: "verifier", timeoutMs: 30_000 });
    if ((reply as { ok?: boolean }).ok !== true) throw new Error(`verify ${m}/db failed: ${JSON.stringify(reply)}`);
    forced.push(performance.now() - tf);
  }
  // Drift: 5 % of the passwords changed behind the verifier's back at moments spread over one interval.
  const drifted = modules.filter((_, i) => i % Math.floor(GRANTS / DRIFTED) === 0).slice(0, DRIFTED);
  const changedAt = new Map<string, number>();
  await Promise.all(
    drifted.map(async (m, i) => {
      await sleep((i / drifted.length) * INTERVAL_MS);
      const role = postgresNames(m, "db").logins[0];
      await admin.query(`ALTER ROLE "${role}" PASSWORD '${randomBytes(12).toString("hex")}'`);
      changedAt.set(m, Date.now());
    }),
  );
  await sleep(Math.max(0, STEADY_MS - (Date.now() - ts)));
  const steadyMs = Date.now() - ts;
  const st1 = verifier.stats();
  const grantWrites = (await lastSeq(Buckets.grants)) - g0;
  const recordWrites = (await lastSeq(Buckets.verifications)) - v0;
  const steadyRate = ((st1.checks - st0.checks) / steadyMs) * 1000;
  // Gaps of the grants no one drifted (a repair is checked again at once, by design).
  const driftedKeys = new Set(drifted.map((m) => keys.grant(m, "db")));
  const steady = intervalKept(ts, ts + steadyMs, driftedKeys);
  const detect = drifted.flatMap((m) => {
    const c = checks.find((x) => x.key === keys.grant(m, "db") && x.at >= changedAt.get(m)! && !x.ok);
    return c ? [c.at - changedAt.get(m)!] : [];
  });

  // ---- two verifiers: the second joins; they split the grants ----
  const nc2 = await connectNats(nats.url);
  const second = await startVerifier({
    store: await openStore(nc2),
    masterKey,
    log: logOf("verifier-2"),
    env,
    concurrency: CONCURRENCY,
    instance: "verifier-2",
  });
  // The second's first checks are of grants it gained, as each comes due: one interval to settle.
  await sleep(INTERVAL_MS);
  const t2 = Date.now();
  await sleep(TWO_MS);
  // A repaired grant is checked again at once, by design: the drifted ones are left out of the gaps.
  const two = gapsIn(t2, t2 + TWO_MS, driftedKeys);
  const byInstance = new Map<string, number>();
  const byWhom = new Map<string, Set<string>>();
  for (const c of checks) {
    if (c.at < t2 || c.at >= t2 + TWO_MS) continue;
    byInstance.set(c.by, (byInstance.get(c.by) ?? 0) + 1);
    byWhom.set(c.key, (byWhom.get(c.key) ?? new Set()).add(c.by));
  }
  const twice = two.gaps.filter((g) => g < FRESH_SHARE * INTERVAL_MS).length;
  const sharedKeys = [...byWhom.values()].filter((w) => w.size > 1).length;
  recordWatch.stop();
  const stats = verifier.stats();
  await second.stop();
  await nc2.close();
  await verifier.stop();
  await admin.end();
  // The second baseline with no verifier running (a bare pass beside a running verifier would share the machine with it).
  const baselineAfter = await bareRate();
  const baselineRate = (baselineBefore + baselineAfter) / 2;

  const gapLine = (gaps: number[]) => `p50 ${s(pct(gaps, 50))}, p99 ${s(pct(gaps, 99))}, max ${s(Math.max(...gaps))}`;
  console.log(
    `\nverification of ${GRANTS} grants, one verifier (concurrency ${CONCURRENCY}), one PostgreSQL; the machine is shared with other work, so both baselines are printed:`,
  );
  line(
    "baseline: bare logins, same concurrency",
    `${baselineRate.toFixed(1)} logins/s (before the pass ${baselineBefore.toFixed(1)}, after ${baselineAfter.toFixed(1)})`,
  );
  line("verifier: first full pass (saturated)", `${passRate.toFixed(1)} checks/s (${passChecks} checks in ${s(passMs)}), ${verified}/${GRANTS} Verified`);
  line(
    "ratio verifier / baseline",
    `${(passRate / baselineRate).toFixed(2)}  (1.00 = a check costs only its login; each check here is a login with the current generation)`,
  );
  line("probes standing in for a check", "0 (no agent here; the verifier logs in itself for every check)");
  // What no verifier can beat: the bare logins this machine's PostgreSQL takes in one interval.
  const ceiling = Math.floor((baselineRate * INTERVAL_MS) / 1000);
  line(
    "grants one interval of bare logins covers",
    `${ceiling} (the most any verifier keeps at ${s(INTERVAL_MS)} here; ${GRANTS} need ${((GRANTS / ceiling) * 100).toFixed(0)} % of it)`,
  );
  line(
    `steady state at the ${s(INTERVAL_MS)} interval (${s(steadyMs)})`,
    `${steadyRate.toFixed(1)} checks/s (${(GRANTS / (INTERVAL_MS / 1000)).toFixed(0)}/s keeps the interval)`,
  );
  const keptLine = (k: ReturnType<typeof intervalKept>) =>
    `${gapLine(k.gaps)}; ${k.kept ? "KEPT" : "NOT kept"} (${k.over} gaps past ${s(INTERVAL_MS)}, ${k.open} grants unchecked for longer at the end, ${k.never} never checked)`;
  line(`  the interval right after the pass`, keptLine(transition));
  line(`  each grant's gap between checks`, `${keptLine(steady)}, ${driftedKeys.size} drifted grants left out`);
  line(
    `  lead (how early a check is asked for)`,
    `${st1.leadMs} ms at the end of the steady state; ${st1.late - st0.late} checks the verifier itself counted late meanwhile`,
  );
  line("meshctl verify meanwhile (5 grants)", `p50 ${ms(pct(forced, 50))}, max ${ms(Math.max(...forced))}`);
  line(
    `writes meanwhile`,
    `${grantWrites} grant writes (the drifted grants' conditions), ${recordWrites} verification-record writes (${(recordWrites / (steadyMs / 1000)).toFixed(1)}/s)`,
  );
  line("bench process RSS (verifier and harness clients)", `${(rss0 / 2 ** 20).toFixed(0)} MiB before the pass, ${(rss1 / 2 ** 20).toFixed(0)} MiB after`);
  console.log(
    `\ndrift detection (${DRIFTED} passwords changed with ALTER ROLE over one interval, repair: auto), beside its bound of one interval, the confirming pause and a second (${s(DRIFT_BOUND_MS)}):`,
  );
  line(
    "detected (first failed check after the change)",
    `${detect.length}/${DRIFTED}: p50 ${ms(pct(detect, 50))}, p99 ${ms(pct(detect, 99))}, max ${ms(Math.max(...detect))}; ${detect.filter((d) => d > DRIFT_BOUND_MS).length} past the bound`,
  );
  console.log(`\ntwo verifiers splitting the ${GRANTS} grants (${s(TWO_MS)} watched, after one interval to settle):`);
  line("checks by each", [...byInstance].map(([k, v]) => `${k} ${v}`).join(", "));
  line(
    "grants checked twice within 80 % of an interval",
    `${twice} of the ${GRANTS - driftedKeys.size} not drifted (grants checked by both: ${sharedKeys}); ${two.per.size}/${GRANTS} grants checked`,
  );
  line("verifier-1 totals", `${stats.checks} checks, ${stats.skipped} skipped as fresh, ${stats.repairs} repairs, ${stats.transitions} condition writes`);
} finally {
  const tt = Date.now();
  await nc.close();
  await db.stop();
  await nats.stop();
  phase("teardown", tt);
}
