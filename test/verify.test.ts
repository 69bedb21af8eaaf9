/**
 * The verifier against a real PostgreSQL (scram-sha-256, so a wrong password really fails) and
 * a real nats-server. Each test makes a real change behind the mesh's back — a dropped role,
 * an `ALTER ROLE … PASSWORD`, a stopped server, a data directory from before the current
 * generation — and watches the grant's `Verified` condition move within a few verification
 * intervals, then come back.
 */
import { execFileSync } from "node:child_process";
import { renameSync, rmSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { keys, subjects, type ModuleDoc } from "@mesh/shared";
import { createLogger } from "@mesh/shared/service";
import { startVerifier } from "@mesh/verifier";
import { bufferOutput, runStatus, runVerify } from "../packages/cli/src/index.js";
import { startPostgres, type Postgres } from "./harness/postgres.js";
import { startTestMesh, type TestMesh } from "./mesh.js";
import { checkedAfter, delivered, moveToGeneration, useAsHolder, verificationOf, verifiedOf, waitVerified, watchVerified } from "./verify-helpers.js";
import { waitFor } from "./harness/wait.js";
import { adminEnv, harnessProvider } from "./fixtures.js";

/** The verifier's interval and the agents' probe interval in these tests. */
const INTERVAL = 1_000;
/**
 * How long a change may take to show: the next check comes within one interval; a check with
 * a repair logs in up to four times. Two intervals and a margin for a
 * busy two-core machine.
 */
const WITHIN = 2 * INTERVAL + 2_000;

function module_(name: string, repair?: "auto" | "report"): ModuleDoc {
  return {
    kind: "Module",
    name,
    parts: [{ name: "api", node: "node-a", installed: true }],
    requires: [{ name: "db", kind: "postgres.database", ...(repair ? { repair } : {}) }],
  };
}

const isVerified = (c: { status: string }) => c.status === "True";

describe("drift on a live provider", () => {
  let db: Postgres;
  let mesh: TestMesh;
  let env: NodeJS.ProcessEnv;

  beforeAll(async () => {
    db = await startPostgres();
    env = adminEnv(db);
    mesh = await startTestMesh({ env, verifier: { intervalMs: INTERVAL }, probeIntervalMs: INTERVAL });
    await mesh.apply([harnessProvider(db), module_("orders"), module_("billing"), module_("stock")]);
    for (const m of ["orders", "billing", "stock"]) await mesh.waitForState(m, "Ready");
    for (const m of ["orders", "billing", "stock"]) await waitVerified(mesh, m, "db", isVerified, "verified", 10_000);
  });
  afterAll(async () => {
    await mesh?.stop();
    await db?.stop();
  });

  it("re-checks every interval but writes the grant only when the outcome changes", async () => {
    // Both the verifier and node-a's agent have counted once the message names node-a.
    await waitVerified(mesh, "orders", "db", (c) => c.message.includes("node node-a (api)"), "verified from node-a", WITHIN);
    const before = (await mesh.store.kv.grants.get(keys.grant("orders", "db")))!.revision;
    const checked = (await verificationOf(mesh, "orders", "db"))!.checkedAt;
    await checkedAfter(mesh, "orders", "db", checked, WITHIN, 2);
    expect((await mesh.store.kv.grants.get(keys.grant("orders", "db")))!.revision).toBe(before);
  });

  it("a second verifier instance shares the work instead of doubling it", async () => {
    const second = await startVerifier({
      store: mesh.store,
      masterKey: mesh.masterKey,
      log: createLogger("verifier", { destination: mesh.logs }),
      env,
      intervalMs: INTERVAL,
      instance: "verifier-2",
    });
    try {
      // Joined: each instance sees both (what decides who owns which grant), as each logs when its view changes.
      await waitFor(
        () => `both instances to see two verifiers (${mesh.logs.lines.filter((l) => l.includes("verifier instances: 2")).length} of 2 said so)`,
        () => mesh.logs.lines.filter((l) => l.includes("verifier instances: 2")).length >= 2,
        10 * INTERVAL,
      );
      const [a0, b0] = [mesh.verifier!.stats(), second.stats()];
      // The window the checks are counted over: six intervals.
      await new Promise((r) => setTimeout(r, 6 * INTERVAL));
      const [a1, b1] = [mesh.verifier!.stats(), second.stats()];
      const checks = a1.checks - a0.checks + (b1.checks - b0.checks);
      // Three grants, one check per interval each (each wait 90–100 % of it): about 18 to 20
      // in six intervals, whichever instance makes them — not 36. Each grant is checked by the
      // one instance that owns it (test/verifier-split.test.ts checks that grant by grant).
      expect(checks).toBeGreaterThanOrEqual(12);
      expect(checks).toBeLessThanOrEqual(24);
    } finally {
      await second.stop();
    }
  });

  it("role dropped → ResourceMissing → re-created (auto) → Verified, and the holder's delivered credential works again", async () => {
    const role = (await mesh.grant("orders", "db"))!.resource.role!;
    const holder = delivered(mesh, "node-a", "orders", "api", "db");
    await useAsHolder(holder);
    const watch = await watchVerified(mesh, "orders", "db");

    await db.query(`DROP ROLE "${role}"`);
    // (Whether the holder fails now is a race with the verifier, which may already have repaired it.)

    const missing = await watch.until("ResourceMissing", (c) => c.reason === "ResourceMissing", WITHIN);
    expect(missing.status).toBe("False");
    expect(missing.message).toContain("its role is missing");
    const back = await watch.until("Verified after the repair", (c) => watch.seen.indexOf(c) > watch.seen.indexOf(missing) && isVerified(c), WITHIN);
    expect(back.reason).toBe("Verified");
    watch.stop();

    expect((await db.query("select 1 from pg_roles where rolname = $1", [role])).rows).toHaveLength(1);
    await useAsHolder(holder); // the same delivered values, unchanged on disk, work again
    const repairs = (await mesh.grant("orders", "db"))!.repairs!;
    expect(repairs.at(-1)).toMatchObject({ action: "recreate", reason: "ResourceMissing", generation: 1, outcome: "repaired", requested: false });
    expect(repairs.at(-1)!.by).toMatch(/^verifier@/);
    expect(mesh.logs.text).toMatch(/repair repaired: ResourceMissing/);

    // meshctl status lists the repair.
    const json = bufferOutput();
    await runStatus(mesh.store, { module: "orders", json: true }, json);
    const grant = (JSON.parse(json.stdout) as { modules: Array<{ grants: Array<Record<string, unknown>> }> }).modules[0]!.grants[0]!;
    expect(grant.repairs).toEqual([expect.objectContaining({ action: "recreate", reason: "ResourceMissing" })]);
    const orders = bufferOutput();
    await runStatus(mesh.store, { module: "orders" }, orders);
    expect(orders.stdout).toMatch(/repairs/);
    expect(orders.stdout).toMatch(/repaired by verifier@\S+: ResourceMissing/);
  });

  it("password changed with ALTER ROLE behind the mesh's back → CredentialRejected → repaired", async () => {
    const role = (await mesh.grant("billing", "db"))!.resource.role!;
    const holder = delivered(mesh, "node-a", "billing", "api", "db");
    const watch = await watchVerified(mesh, "billing", "db");

    await db.query(`ALTER ROLE "${role}" PASSWORD 'changed-by-hand'`);

    const rejected = await watch.until("CredentialRejected", (c) => c.reason === "CredentialRejected", WITHIN);
    expect(rejected.message).toContain(`rejects generation 1 of billing/db`);
    await watch.until("Verified after the repair", (c) => watch.seen.indexOf(c) > watch.seen.indexOf(rejected) && isVerified(c), WITHIN);
    watch.stop();
    await useAsHolder(holder);
    expect((await mesh.grant("billing", "db"))!.repairs!.at(-1)).toMatchObject({ action: "reapply", reason: "CredentialRejected", outcome: "repaired" });
  });

  it("meshctl verify checks now and prints the result; status shows Verified with its age and where from", async () => {
    const connect = async () => mesh.nc;
    const out = bufferOutput();
    expect(await runVerify(connect, { grant: "stock/db", json: true }, out)).toBe(0);
    const reply = JSON.parse(out.stdout) as {
      grant: string;
      condition: { status: string; reason: string };
      verification: { probes: Record<string, { ok: boolean }> };
    };
    expect(reply.grant).toBe("stock/db");
    expect(reply.condition).toMatchObject({ status: "True", reason: "Verified" });
    // The forced check asked node-a's agent to probe too.
    expect(reply.verification.probes["node-a/api"]?.ok).toBe(true);

    const text = bufferOutput();
    expect(await runVerify(connect, { grant: "stock/db" }, text)).toBe(0);
    expect(text.stdout).toMatch(/^stock\/db {2}Verified True {2}Verified/);
    expect(text.stdout).toMatch(/verified \d+ s ago from (verifier|node-a)/);

    const status = bufferOutput();
    expect(await runStatus(mesh.store, { module: "stock" }, status)).toBe(0);
    expect(status.stdout).toMatch(/Verified +True +Verified +verified \d+ s ago from (verifier|node-a)/);
    const json = bufferOutput();
    await runStatus(mesh.store, { module: "stock", json: true }, json);
    const grant = (JSON.parse(json.stdout) as { modules: Array<{ grants: Array<Record<string, unknown>> }> }).modules[0]!.grants[0]!;
    expect(grant.verification).toMatchObject({ lastCheckedFrom: expect.stringMatching(/^(verifier|node-a)$/) });

    // Not a grant: refused before anything is sent (exit 2); an unknown one: the verifier says so.
    await expect(runVerify(connect, { grant: "stock" }, bufferOutput())).rejects.toMatchObject({ exitCode: 2 });
    await expect(runVerify(connect, { grant: "nope/db" }, bufferOutput())).rejects.toThrow(/grant nope\/db does not exist/);
  });

  it("provider stopped → ProviderUnreachable (from the verifier); started again → Verified, with no manual step", async () => {
    const watch = await watchVerified(mesh, "stock", "db");
    await db.stop({ keepData: true });
    const down = await watch.until("ProviderUnreachable", (c) => c.reason === "ProviderUnreachable", WITHIN);
    expect(down.status).toBe("False");
    expect(down.message).toMatch(/provider pg-main cannot be reached from the verifier/);
    expect(down.message).toContain("check that provider pg-main runs");
    // No repair is attempted against a provider that does not answer.
    expect((await mesh.grant("stock", "db"))!.repairs ?? []).toEqual([]);
    // meshctl verify says so too, with exit code 4.
    const out = bufferOutput();
    expect(await runVerify(async () => mesh.nc, { grant: "stock/db" }, out)).toBe(4);
    expect(out.stdout).toContain("ProviderUnreachable");

    await db.start();
    await watch.until("Verified again", (c) => watch.seen.indexOf(c) > watch.seen.indexOf(down) && isVerified(c), WITHIN);
    watch.stop();
    await useAsHolder(delivered(mesh, "node-a", "stock", "api", "db"));
    // Every grant comes back by itself.
    for (const m of ["orders", "billing", "stock"]) await waitVerified(mesh, m, "db", isVerified, "verified again", WITHIN);
  });

  it("keeps every delivered and admin password out of the log and the verification records", async () => {
    expect(mesh.logs.text).toMatch(/repair repaired/);
    const secrets = [db.adminPassword, ...["orders", "billing", "stock"].map((m) => delivered(mesh, "node-a", m, "api", "db").password)];
    for (const secret of secrets) expect(mesh.logs.text).not.toContain(secret);
    const info = await mesh.store.jsm.streams.info("KV_mesh-verifications");
    expect(info.state.messages).toBeGreaterThan(0);
    for (let seq = info.state.first_seq; seq <= info.state.last_seq; seq++) {
      const m = await mesh.store.jsm.streams.getMessage("KV_mesh-verifications", { seq }).catch(() => null);
      if (!m) continue;
      const text = new TextDecoder().decode(m.data);
      for (const secret of secrets) expect(text).not.toContain(secret);
    }
  });
});

describe("frozen password: a data directory from before the current generation", () => {
  let db: Postgres;
  let mesh: TestMesh;
  let env: NodeJS.ProcessEnv;

  beforeAll(async () => {
    db = await startPostgres();
    env = adminEnv(db);
    mesh = await startTestMesh({ env, verifier: { intervalMs: INTERVAL }, probeIntervalMs: INTERVAL });
  });
  afterAll(async () => {
    await mesh?.stop();
    await db?.stop();
  });

  it("→ CredentialDiverged naming generation 1 → repaired to generation 2; with repair: report it stays diverged and says what to do", async () => {
    await mesh.apply([harnessProvider(db), module_("ledger"), module_("archive", "report")]);
    for (const m of ["ledger", "archive"]) {
      await mesh.waitForState(m, "Ready");
      await waitVerified(mesh, m, "db", (c) => isVerified(c) && c.message.startsWith("generation 1 "), "verified at generation 1", 10_000);
    }

    // The data directory as it is at generation 1, kept aside like a persistent volume.
    const frozen = `${db.dataDir}.generation-1`;
    await db.stop({ keepData: true });
    // cp -a keeps owners and modes: PostgreSQL refuses a data directory it does not own.
    execFileSync("cp", ["-a", db.dataDir, frozen]);
    await db.start();

    // Meanwhile the mesh moves both grants to generation 2.
    for (const m of ["ledger", "archive"]) await moveToGeneration(mesh, harnessProvider(db), env, m, "db", 2);
    for (const m of ["ledger", "archive"]) {
      await waitVerified(mesh, m, "db", (c) => isVerified(c) && c.message.startsWith("generation 2 "), "verified at generation 2", WITHIN);
    }
    const ledgerHolder = delivered(mesh, "node-a", "ledger", "api", "db");
    const archiveHolder = delivered(mesh, "node-a", "archive", "api", "db");
    expect(ledgerHolder.username).toMatch(/_b$/); // generation 2's login role

    // The server comes back with the data directory initialised at generation 1.
    const ledger = await watchVerified(mesh, "ledger", "db");
    await db.stop({ keepData: true });
    rmSync(db.dataDir, { recursive: true, force: true });
    renameSync(frozen, db.dataDir);
    await db.start();
    await expect(useAsHolder(archiveHolder)).rejects.toThrow(/password authentication failed/);

    const diverged = await ledger.until("CredentialDiverged", (c) => c.reason === "CredentialDiverged", WITHIN);
    expect(diverged.message).toContain("accepts generation 1 of ledger/db, not the current generation 2");
    await ledger.until(
      "Verified at generation 2",
      (c) => ledger.seen.indexOf(c) > ledger.seen.indexOf(diverged) && isVerified(c) && c.message.startsWith("generation 2 "),
      WITHIN,
    );
    ledger.stop();
    await useAsHolder(ledgerHolder);
    expect((await mesh.grant("ledger", "db"))!.repairs!.at(-1)).toMatchObject({
      action: "reapply",
      reason: "CredentialDiverged",
      generation: 2,
      outcome: "repaired",
    });

    // repair: report — diagnosed the same way, and left alone, with what to do.
    const reported = await waitVerified(mesh, "archive", "db", (c) => c.reason === "CredentialDiverged", "diverged", WITHIN);
    expect(reported.message).toContain("accepts generation 1 of archive/db, not the current generation 2");
    expect(reported.message).toContain("repair is set to report, so nothing was changed");
    expect(reported.message).toContain("meshctl verify archive/db --repair");
    await checkedAfter(mesh, "archive", "db", (await verificationOf(mesh, "archive", "db"))!.checkedAt, WITHIN, 2);
    expect(await verifiedOf(mesh, "archive", "db")).toMatchObject({ status: "False", reason: "CredentialDiverged", observedAt: reported.observedAt });
    expect((await mesh.grant("archive", "db"))!.repairs ?? []).toEqual([]);
    await expect(useAsHolder(archiveHolder)).rejects.toThrow(/password authentication failed/);

    // What the message says to do: meshctl verify --repair, then it holds.
    const out = bufferOutput();
    expect(await runVerify(async () => mesh.nc, { grant: "archive/db", repair: true }, out)).toBe(0);
    expect(out.stdout).toMatch(/repaired: CredentialDiverged/);
    await useAsHolder(archiveHolder);
    expect((await mesh.grant("archive", "db"))!.repairs!.at(-1)).toMatchObject({ reason: "CredentialDiverged", outcome: "repaired", requested: true });
    await waitVerified(mesh, "archive", "db", isVerified, "verified", WITHIN);
  });

  it("answers a malformed verify request with a structured error", async () => {
    const m = await mesh.nc.request(subjects.verify, JSON.stringify({ grant: 42 }), { timeout: 5_000 });
    expect(m.json()).toMatchObject({ ok: false, error: { code: "InvalidRequest" } });
    // And the verifier goes on answering.
    const next = await mesh.nc.request(subjects.verify, JSON.stringify({ grant: "nope/db" }), { timeout: 5_000 });
    expect(next.json()).toMatchObject({ ok: false, error: { message: expect.stringContaining("grant nope/db does not exist") } });
  });
});
