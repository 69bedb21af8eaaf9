/**
 * Two verifier processes (services/verifier/src/main.ts, from sources, each with its own NATS
 * connection and pid) against a real PostgreSQL and a real nats-server: they split the grants
 * through their membership in KV `mesh-instances`, so every grant is checked once per interval
 * by one of them and never twice; when one is killed, the other takes its grants over; and an
 * out-of-band password change is seen by the owner's next check, whichever of them owns the
 * grant. Every check is read back from the history of KV `mesh-verifications` (each record
 * names the instance and the time of its check).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Verification, keys, parseMasterKey, type ModuleDoc } from "@mesh/shared";
import { startPostgres, type Postgres } from "./harness/postgres.js";
import { waitFor } from "./harness/wait.js";
import { startTestMesh, type TestMesh } from "./mesh.js";
import { adminEnv, harnessProvider } from "./fixtures.js";

const repo = join(import.meta.dirname, "..");
const sources = join(repo, "test/harness/tsconfig.sources.json");

/** The verifiers' interval here. */
const INTERVAL = 2_000;
const MODULES = Array.from({ length: 12 }, (_, i) => `split-${i}`);

function module_(name: string): ModuleDoc {
  return { kind: "Module", name, parts: [{ name: "api", node: "node-a", installed: true }], requires: [{ name: "db", kind: "postgres.database" }] };
}

interface VerifierProcess {
  name: string;
  child: ChildProcess;
  output: () => string;
}

/** One check as its record says: which grant, which instance, when, and whether it passed. */
interface Check {
  key: string;
  by: string;
  at: number;
  ok: boolean;
}

describe("two verifier processes", () => {
  let db: Postgres;
  let mesh: TestMesh;
  let env: NodeJS.ProcessEnv;
  const masterKeyHex = randomBytes(32).toString("hex");
  const procs: VerifierProcess[] = [];
  const checks: Check[] = [];
  /** Grants the drift test changed: a repair is checked again at once, by design. */
  const drifted = new Set<string>();
  let stopWatch: (() => void) | undefined;

  const startVerifierProcess = (name: string): VerifierProcess => {
    let out = "";
    // Node itself with tsx as its loader (not the tsx command, which runs node as a child of its
    // own): the pid signalled is the verifier's, so SIGKILL kills the verifier.
    const child = spawn(process.execPath, ["--import", "tsx", "services/verifier/src/main.ts"], {
      cwd: repo,
      env: {
        ...env,
        TSX_TSCONFIG_PATH: sources,
        NATS_URL: mesh.nats.url,
        MESH_MASTER_KEY: masterKeyHex,
        MESH_VERIFY_INTERVAL: `${INTERVAL}ms`,
        MESH_LOG_LEVEL: process.env.SPLIT_LOG_LEVEL ?? "info",
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    for (const s of [child.stdout!, child.stderr!]) s.on("data", (d: Buffer) => (out = (out + d.toString()).slice(-20_000)));
    const p = { name, child, output: () => out };
    procs.push(p);
    return p;
  };
  const stop = async (p: VerifierProcess, signal: NodeJS.Signals) => {
    if (p.child.exitCode !== null || p.child.signalCode !== null) return;
    const exited = new Promise<void>((r) => p.child.once("exit", () => r()));
    p.child.kill(signal);
    await Promise.race([exited, new Promise((r) => setTimeout(r, 10_000))]);
    if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill("SIGKILL");
  };
  /** The instance name a process's records carry (`verifier@<host>/<pid>`, the pid of the node process tsx starts), from its start-up log line. */
  const instanceOf = (p: VerifierProcess) => {
    const name = /"instance":"(verifier@[^"]+)"/.exec(p.output())?.[1];
    return { test: (by: string) => name !== undefined && by === name };
  };
  const checksSince = (t: number) => checks.filter((c) => c.at >= t);
  const byKey = (cs: Check[]) => {
    const m = new Map<string, Check[]>();
    for (const c of cs) m.set(c.key, [...(m.get(c.key) ?? []), c]);
    return m;
  };

  beforeAll(async () => {
    db = await startPostgres();
    env = adminEnv(db);
    // No verifier in this process: the two below are the only ones.
    mesh = await startTestMesh({ env, masterKey: parseMasterKey(masterKeyHex) });
    await mesh.apply([harnessProvider(db), ...MODULES.map(module_)]);
    for (const m of MODULES) await mesh.waitForState(m, "Ready", 60_000);
    // Every write of a verification record is one check (or a probe folded in, which keeps checkedAt).
    const w = await mesh.store.kv.verifications.watch({ include: "updates" });
    stopWatch = () => w.stop();
    const last = new Map<string, string>();
    void (async () => {
      for await (const e of w) {
        if (e.operation !== "PUT") continue;
        const v = Verification.parse(e.json());
        if (last.get(e.key) === v.checkedAt) continue;
        last.set(e.key, v.checkedAt);
        checks.push({ key: e.key, by: v.checkedBy, at: Date.parse(v.checkedAt), ok: v.verifier.ok });
      }
    })();
  }, 120_000);
  afterAll(async () => {
    stopWatch?.();
    for (const p of procs) await stop(p, "SIGTERM");
    await mesh?.stop();
    await db?.stop();
  });

  /** Two verifier processes, both checking: the running pair, or a new one (the test before may have killed one). */
  const bothRunning = async (): Promise<[VerifierProcess, VerifierProcess]> => {
    const alive = (p: VerifierProcess) => p.child.exitCode === null && p.child.signalCode === null;
    const [x, y] = procs.slice(-2);
    if (x && y && alive(x) && alive(y)) return [x, y];
    for (const p of procs) await stop(p, "SIGTERM");
    const [a, b] = [startVerifierProcess("a"), startVerifierProcess("b")];
    // Both have checked something: both have joined.
    await waitFor("both verifiers checking", () => checks.some((c) => instanceOf(a).test(c.by)) && checks.some((c) => instanceOf(b).test(c.by)), 60_000).catch(
      (e: unknown) => {
        throw new Error(`${String(e)}\n--- a ---\n${a.output()}\n--- b ---\n${b.output()}`);
      },
    );
    return [a, b];
  };

  it("split the grants: each checked once per interval, by one of them, never twice", async () => {
    const [a, b] = await bothRunning();
    // Past the start (the first checks of each are spread over an interval): every grant checked since, then four intervals watched.
    const joined = Date.now();
    await waitFor("every grant checked since both joined", () => byKey(checksSince(joined)).size === MODULES.length, 4 * INTERVAL);
    const from = Date.now();
    // The window the counts below are taken over.
    await new Promise((r) => setTimeout(r, 4 * INTERVAL));
    const seen = checksSince(from);
    const perKey = byKey(seen);
    expect([...perKey.keys()].sort()).toEqual(MODULES.map((m) => keys.grant(m, "db")).sort());
    for (const [key, cs] of perKey) {
      // Each grant by one instance throughout (no handover happened here).
      expect(new Set(cs.map((c) => c.by)).size, `${key} checked by ${[...new Set(cs.map((c) => c.by))].join(", ")}`).toBe(1);
      // Never twice within an interval: the waits are 90–100 % of it.
      const at = cs.map((c) => c.at).sort((x, y) => x - y);
      for (let i = 1; i < at.length; i++) expect(at[i]! - at[i - 1]!, `${key}: checks ${at[i]! - at[i - 1]!} ms apart`).toBeGreaterThanOrEqual(0.8 * INTERVAL);
      // And once in every interval: four intervals hold three or four checks of it.
      expect(cs.length, `${key} checked ${cs.length} times in four intervals`).toBeGreaterThanOrEqual(3);
    }
    // Both share the work.
    const ofA = seen.filter((c) => instanceOf(a).test(c.by)).length;
    const ofB = seen.filter((c) => instanceOf(b).test(c.by)).length;
    expect(ofA + ofB).toBe(seen.length);
    expect(ofA).toBeGreaterThan(0);
    expect(ofB).toBeGreaterThan(0);
  }, 120_000);

  // By the next check, not by a time: under CI load a check took long enough that the failure
  // came 3.4 s after the change (the interval 2 s). How long the verifier takes to keep its
  // interval is the verify bench's to measure; here, no check after the change may pass it by.
  it("drift on a grant of either is seen by the next check of whichever verifier owns it", async () => {
    const [a, b] = await bothRunning();
    const since = Date.now();
    await waitFor("every grant checked from now on", () => byKey(checksSince(since)).size === MODULES.length, 4 * INTERVAL);
    // One grant each verifier owns (by its last check).
    const last = new Map([...byKey(checksSince(since))].map(([k, cs]) => [k, cs.at(-1)!]));
    const ofA = [...last.values()].find((c) => instanceOf(a).test(c.by))!;
    const ofB = [...last.values()].find((c) => instanceOf(b).test(c.by))!;
    expect(ofA && ofB).toBeTruthy();
    for (const c of [ofA, ofB]) {
      const module = c.key.split(".")[0]!;
      const role = (await mesh.grant(module, "db"))!.resource.role!;
      drifted.add(c.key);
      const changedAt = Date.now();
      await db.query(`ALTER ROLE "${role}" PASSWORD 'changed-by-hand'`);
      const alteredAt = Date.now();
      // The first failed check after the change (the verifier records it before it repairs).
      const seen = await waitFor(`${module}/db rejected`, () => checks.find((x) => x.key === c.key && x.at >= changedAt && !x.ok), INTERVAL + 10_000, 20);
      // Passed after the change: at most the one check that was logging in while ALTER ROLE ran.
      const passed = checks.filter((x) => x.key === c.key && x.at > alteredAt && x.at < seen.at && x.ok);
      expect(
        passed.length,
        `${module}/db: checks that passed after the change, before the failure ${seen.at - changedAt} ms after it: ${JSON.stringify(passed)}`,
      ).toBeLessThanOrEqual(1);
    }
  }, 60_000);

  it("a verifier killed: the other takes its grants over, still never checking one twice", async () => {
    const [a, b] = await bothRunning();
    const killedAt = Date.now();
    await stop(a, "SIGKILL");
    // Its heartbeats stop; after STALE_MS (3.5 s) the survivor owns everything.
    await waitFor(
      "the survivor to check every grant",
      () => byKey(checksSince(killedAt).filter((c) => instanceOf(b).test(c.by))).size === MODULES.length,
      3_500 + 6 * INTERVAL,
    );
    const from = Date.now();
    // The window the checks below are taken over.
    await new Promise((r) => setTimeout(r, 3 * INTERVAL));
    const perKey = byKey(checksSince(from));
    expect(perKey.size).toBe(MODULES.length);
    for (const [key, cs] of perKey)
      expect(
        cs.every((c) => instanceOf(b).test(c.by)),
        `${key} after the kill`,
      ).toBe(true);
    // Across the handover too, no grant was checked twice within an interval.
    for (const [key, cs] of byKey(checksSince(killedAt - INTERVAL))) {
      if (drifted.has(key)) continue;
      const at = cs.map((c) => c.at).sort((x, y) => x - y);
      for (let i = 1; i < at.length; i++) expect(at[i]! - at[i - 1]!, `${key}: checks ${at[i]! - at[i - 1]!} ms apart`).toBeGreaterThanOrEqual(0.8 * INTERVAL);
    }
  }, 60_000);
});
