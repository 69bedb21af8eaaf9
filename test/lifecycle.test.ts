/**
 * The end of a claim, on a real nats-server and the harness's scram PostgreSQL (a wrong or
 * locked login really fails): whatever no installed part needs any more is taken back —
 * revoked at its provider, its values purged from the store, its bindings removed from the
 * node — whether a requirement was removed, the module deleted, or a part uninstalled; data
 * is kept unless `deletionPolicy: Delete`, and adopted when declared again.
 */
import { spawn } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import pg from "pg";
import { DeleteReply, getCondition, isRevoked, keys, subjects, type ModuleDoc } from "@mesh/shared";
import { createLogger } from "@mesh/shared/service";
import { startProvisioner } from "@mesh/provisioner";
import { startResolver } from "@mesh/resolver";
import { startRotator } from "@mesh/rotator";
import { startAgent } from "@mesh/agent";
import { holdCredential, watchCredentials } from "@mesh/client";
import { startPostgres, type Postgres } from "./harness/postgres.js";
import { adminEnv, harnessProvider } from "./fixtures.js";
import { startTestMesh, type TestMesh } from "./mesh.js";
import { runMeshctl } from "./harness/bootstrapped-mesh.js";
import { waitFor } from "./harness/wait.js";
import { scratchDir } from "./harness/scratch.js";

let db: Postgres;
let mesh: TestMesh;

const partDir = (module: string, part: string) => join(mesh.bindingsRoot, "node-a", module, part);
const read = (dir: string, key: string) => readFileSync(join(dir, key), "utf8");
/** What a part was delivered of a database grant. */
const dbBinding = (module: string, part: string, requirement = "db") => {
  const dir = join(partDir(module, part), requirement);
  return { user: read(dir, "username"), password: read(dir, "password"), database: read(dir, "database") };
};

async function login(b: { user: string; password: string; database: string }): Promise<string | undefined> {
  const c = new pg.Client({ host: db.host, port: db.port, user: b.user, password: b.password, database: b.database });
  try {
    await c.connect();
    await c.query("select 1");
    return undefined;
  } catch (e) {
    return String(e);
  } finally {
    await c.end().catch(() => undefined);
  }
}

async function del(body: object): Promise<DeleteReply> {
  const m = await mesh.nc.request(subjects.delete, JSON.stringify(body), { timeout: 10_000 });
  return DeleteReply.parse(m.json());
}

/** Every value the store holds of a grant, at any revision (a purge leaves none). */
async function storedRevisions(module: string, requirement: string): Promise<number> {
  let n = 0;
  for await (const _ of await mesh.store.kv.credentials.keys(keys.credentialsOf(module, requirement))) n++;
  for (let g = 1; g <= 5; g++) {
    for await (const e of await mesh.store.kv.credentials.history({ key: keys.credential(module, requirement, g) })) if (e.operation === "PUT") n++;
  }
  return n;
}

/** Runs the built meshctl against the test's mesh. */
const meshctlIn = (args: string[]) => runMeshctl(tmpdir(), args, { ...process.env, NO_COLOR: "1", NATS_URL: mesh.nats.url, MESH_NATS_CREDENTIALS: "" });

const module = (name: string, requires: ModuleDoc["requires"], parts: ModuleDoc["parts"] = [{ name: "api", node: "node-a", installed: true }]): ModuleDoc => ({
  kind: "Module",
  name,
  parts,
  requires,
});

beforeAll(async () => {
  db = await startPostgres();
  mesh = await startTestMesh({ env: adminEnv(db) });
  expect((await mesh.apply([harnessProvider(db)])).ok).toBe(true);
}, 60_000);

afterAll(async () => {
  await mesh?.stop();
  await db?.stop();
});

describe("removing a requirement", () => {
  it("revokes the credential at the provider within seconds, removes the binding, and leaves no value of it in the store; the data is retained", async () => {
    await mesh.apply([
      module("rm", [
        { name: "db", kind: "postgres.database" },
        { name: "key", kind: "secret" },
      ]),
    ]);
    await mesh.waitForState("rm", "Ready");
    const b = dbBinding("rm", "api");
    expect(await login(b)).toBeUndefined();
    expect(await storedRevisions("rm", "db")).toBeGreaterThan(0);

    await mesh.apply([module("rm", [{ name: "key", kind: "secret" }])]);
    const g = await waitFor(
      "the grant to be taken back and retained",
      async () => {
        const g = await mesh.grant("rm", "db");
        return g?.retained ? g : undefined;
      },
      15_000,
    );
    expect(await login(b)).toMatch(/not permitted to log in|password authentication failed/);
    expect(existsSync(join(partDir("rm", "api"), "db"))).toBe(false);
    expect(readFileSync(join(mesh.bindingsRoot, "node-a", "rm", "api.env"), "utf8")).not.toContain("DB_PASSWORD");
    expect(await storedRevisions("rm", "db")).toBe(0);
    expect(g.holders).toEqual({});
    expect(getCondition(g.conditions, "Provisioned")).toMatchObject({ status: "False", reason: "NoInstalledPart" });
    // The data is still there; the other requirement untouched.
    expect((await db.query("select 1 from pg_database where datname = $1", [b.database])).rowCount).toBe(1);
    expect(existsSync(join(partDir("rm", "api"), "key", "value"))).toBe(true);
    expect((await mesh.moduleStatus("rm"))?.state).toBe("Ready");
  });

  it("a secret (a credential alone) is deleted outright: no grant, no value left; declared again at once, it is delivered afresh", async () => {
    await mesh.apply([module("rm", [])]);
    await waitFor("the secret's grant to be gone", async () => ((await mesh.grant("rm", "key")) ? undefined : true), 15_000);
    expect(existsSync(join(partDir("rm", "api"), "key"))).toBe(false);
    expect(await storedRevisions("rm", "key")).toBe(0);
    await mesh.apply([module("rm", [{ name: "key", kind: "secret" }])]);
    await waitFor("the new secret on the node", () => (existsSync(join(partDir("rm", "api"), "key", "value")) ? true : undefined), 15_000);
  });
});

describe("an SDK holder", () => {
  it("watching its part's credentials is told when a grant is taken back, and gets it anew when it is declared again", async () => {
    await mesh.apply([module("sdk", [{ name: "key", kind: "secret" }])]);
    await mesh.waitForState("sdk", "Ready");
    const withdrawn: string[] = [];
    const watch = await watchCredentials(mesh.nc, { module: "sdk", part: "api", node: "node-a", onWithdrawn: (g) => withdrawn.push(g.grant) });
    try {
      const it = watch[Symbol.asyncIterator]();
      expect((await it.next()).value).toMatchObject({ grant: "sdk/key", generation: 1 });
      await mesh.apply([module("sdk", [])]);
      await waitFor("the watch to be told", () => (withdrawn.length ? true : undefined), 15_000);
      expect(withdrawn).toEqual(["sdk/key"]);
      await mesh.apply([module("sdk", [{ name: "key", kind: "secret" }])]);
      expect((await it.next()).value).toMatchObject({ grant: "sdk/key", generation: 1 });
    } finally {
      await watch.stop();
    }
  });

  it("holding a credential is told when its grant is taken back, and its iteration ends", async () => {
    await mesh.apply([module("sdk2", [{ name: "key", kind: "secret" }])]);
    await mesh.waitForState("sdk2", "Ready");
    let told = 0;
    const holder = await holdCredential(mesh.nc, { module: "sdk2", part: "api", node: "node-a", requirement: "key", onWithdrawn: () => told++ });
    const it = holder[Symbol.asyncIterator]();
    expect((await it.next()).value).toMatchObject({ grant: "sdk2/key", generation: 1 });
    await mesh.apply([module("sdk2", [])]);
    expect(await it.next()).toEqual({ value: undefined, done: true });
    expect(told).toBe(1);
    const reg = keys.holder("sdk2", "key", "node-a", "api", holder.holder.split("/")[2]!);
    await waitFor("its registration to be removed", async () => ((await mesh.store.kv.holders.get(reg))?.operation === "PUT" ? undefined : true));
  });
});

describe("deleting a module", () => {
  it("with the default policy: logins fail, the database and its table stay, listed as retained; applying it again adopts them with a new credential", async () => {
    await mesh.apply([module("keep", [{ name: "db", kind: "postgres.database" }])]);
    await mesh.waitForState("keep", "Ready");
    const b = dbBinding("keep", "api");
    const c = new pg.Client({ host: db.host, port: db.port, user: b.user, password: b.password, database: b.database });
    await c.connect();
    await c.query("create table orders (id int primary key, item text)");
    await c.query("insert into orders values (1, 'tea')");
    await c.end();

    expect(await del({ documents: [{ kind: "Module", name: "keep" }] })).toEqual({ ok: true, deleted: [{ kind: "Module", name: "keep" }] });
    const status = await mesh.waitForState("keep", "Deleted", 15_000);
    expect(status.message).toContain("retained db");
    expect(status.message).toContain("meshctl delete retained keep/db");
    expect(await login(b)).toMatch(/not permitted to log in|password authentication failed/);
    expect(existsSync(join(partDir("keep", "api"), "db"))).toBe(false);

    await mesh.apply([module("keep", [{ name: "db", kind: "postgres.database" }])]);
    await mesh.waitForState("keep", "Ready", 15_000);
    const again = dbBinding("keep", "api");
    expect(again.password).not.toBe(b.password);
    expect(again.database).toBe(b.database);
    const c2 = new pg.Client({ host: db.host, port: db.port, user: again.user, password: again.password, database: again.database });
    await c2.connect();
    expect((await c2.query("select item from orders")).rows).toEqual([{ item: "tea" }]);
    await c2.end();
    const g = (await mesh.grant("keep", "db"))!;
    expect(g.retained).toBeUndefined();
    expect(g.revoked).toBeUndefined();
    expect(g.generation).toBe(2);
  });

  it("with deletionPolicy Delete: the database is dropped and the module has no state any more", async () => {
    await mesh.apply([module("drop", [{ name: "db", kind: "postgres.database", deletionPolicy: "Delete" }])]);
    await mesh.waitForState("drop", "Ready");
    const b = dbBinding("drop", "api");
    expect((await del({ documents: [{ kind: "Module", name: "drop" }] })).ok).toBe(true);
    await waitFor("the module to have no state", async () => ((await mesh.moduleStatus("drop")) ? undefined : true), 15_000);
    expect((await db.query("select 1 from pg_database where datname = $1", [b.database])).rowCount).toBe(0);
    expect(await mesh.grant("drop", "db")).toBeUndefined();
    expect(await storedRevisions("drop", "db")).toBe(0);
  });

  it("meshctl delete retained drops what was kept", async () => {
    await mesh.apply([module("kept", [{ name: "db", kind: "postgres.database" }])]);
    await mesh.waitForState("kept", "Ready");
    const b = dbBinding("kept", "api");
    await mesh.apply([module("kept", [])]);
    await waitFor("kept/db to be retained", async () => ((await mesh.grant("kept", "db"))?.retained ? true : undefined), 15_000);
    expect(await del({ retained: ["kept/db"] })).toEqual({ ok: true, deleted: [{ kind: "Retained", name: "kept/db" }] });
    await waitFor("kept/db to be gone", async () => ((await mesh.grant("kept", "db")) ? undefined : true), 15_000);
    expect((await db.query("select 1 from pg_database where datname = $1", [b.database])).rowCount).toBe(0);
    const refused = await del({ retained: ["kept/db"] });
    expect(refused.ok).toBe(false);
  });

  it("module mesh, the control plane, is not deleted without force, and nothing changes", async () => {
    await mesh.apply([module("mesh", [{ name: "records-key", kind: "secret" }])]);
    await mesh.waitForState("mesh", "Ready");
    const before = (await mesh.grant("mesh", "records-key"))!;
    const r = await del({ documents: [{ kind: "Module", name: "mesh" }] });
    expect(r.ok).toBe(false);
    expect(r.ok ? "" : r.problems[0]!.message).toMatch(/control plane.*refused without --force/);
    // Nor is one of its requirements dropped by an apply.
    const applied = await mesh.apply([module("mesh", [])]);
    expect(applied.ok).toBe(false);
    expect(JSON.stringify(applied)).toMatch(/dropping records-key.*refused without --force/);
    expect((await mesh.grant("mesh", "records-key"))?.generation).toBe(before.generation);
    expect((await mesh.moduleStatus("mesh"))?.state).toBe("Ready");
  });

  it("a provider that still serves grants is not deleted without force", async () => {
    await mesh.apply([module("uses", [{ name: "db", kind: "postgres.database" }])]);
    await mesh.waitForState("uses", "Ready");
    const r = await del({ documents: [{ kind: "Provider", name: "pg-main" }] });
    expect(r.ok).toBe(false);
    expect(r.ok ? "" : r.problems[0]!.message).toMatch(/pg-main still serves .*uses\/db.*--force/);
  });
});

describe("uninstalling a part", () => {
  it("revokes only what no other installed part needs", async () => {
    const parts = (aInstalled: boolean): ModuleDoc["parts"] => [
      { name: "a", node: "node-a", installed: aInstalled },
      { name: "b", node: "node-a", installed: true },
    ];
    const requires: ModuleDoc["requires"] = [
      { name: "shared", kind: "postgres.database", parts: ["a", "b"] },
      { name: "own", kind: "postgres.database", parts: ["a"] },
    ];
    await mesh.apply([module("two", requires, parts(true))]);
    await mesh.waitForState("two", "Ready");
    const shared = dbBinding("two", "b", "shared");
    const own = dbBinding("two", "a", "own");

    await mesh.apply([module("two", requires, parts(false))]);
    await waitFor(
      "a's bindings to be removed",
      () => (!existsSync(join(partDir("two", "a"), "shared")) && !existsSync(join(partDir("two", "a"), "own")) ? true : undefined),
      15_000,
    );
    await waitFor("two/own to be revoked", async () => (isRevoked((await mesh.grant("two", "own"))!) ? true : undefined), 15_000);
    expect(await login(own)).toMatch(/not permitted to log in|password authentication failed/);
    expect(await storedRevisions("two", "own")).toBe(0);
    // What b still needs keeps working, unrevoked, still delivered to b.
    expect(await login(shared)).toBeUndefined();
    expect(dbBinding("two", "b", "shared").password).toBe(shared.password);
    const g = (await mesh.grant("two", "shared"))!;
    expect(g.revoked).toBeUndefined();
    expect(Object.keys(g.holders)).toEqual(["node-a/b"]);

    // Installed again: a fresh credential for what was taken back, on the same database.
    await mesh.apply([module("two", requires, parts(true))]);
    await waitFor("a's own database delivered again", () => (existsSync(join(partDir("two", "a"), "own", "password")) ? true : undefined), 15_000);
    const ownAgain = dbBinding("two", "a", "own");
    // What it shared with b comes back too, the same generation delivered anew after its withdrawal (within the stream's duplicate window).
    await waitFor("a's shared database delivered again", () => (existsSync(join(partDir("two", "a"), "shared", "password")) ? true : undefined), 15_000);
    expect(dbBinding("two", "a", "shared").password).toBe(shared.password);
    expect(ownAgain.database).toBe(own.database);
    expect(ownAgain.password).not.toBe(own.password);
    expect(await login(ownAgain)).toBeUndefined();
  });
});

describe("meshctl delete (built)", () => {
  const meshctl = meshctlIn;

  it("delete module exits 0 once revoked at the provider, saying what is retained; status shows it; delete -f and retained follow", async () => {
    await mesh.apply([
      module("cli", [
        { name: "db", kind: "postgres.database" },
        { name: "key", kind: "secret" },
      ]),
    ]);
    await mesh.waitForState("cli", "Ready");
    const b = dbBinding("cli", "api");
    const r = await meshctl(["delete", "module", "cli"]);
    expect(r.stderr + r.stdout).toContain("deleted module cli");
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain("cli/db: revoked, its data retained (meshctl delete retained cli/db drops it)");
    // Revoked by the time it exits.
    expect(await login(b)).toMatch(/not permitted to log in|password authentication failed/);
    const status = await waitFor(
      "status to show Deleted",
      async () => {
        const s = await meshctl(["status", "cli"]);
        return /cli\s+Deleted/.test(s.stdout) ? s : undefined;
      },
      15_000,
    );
    expect(status.stdout).toContain("Retained");
    expect(status.stdout).toContain("meshctl delete retained cli/db");

    const dropped = await meshctl(["delete", "retained", "cli/db", "--json"]);
    expect(dropped.code, dropped.stderr).toBe(0);
    expect(JSON.parse(dropped.stdout)).toMatchObject({ ok: true, deleted: [{ kind: "Retained", name: "cli/db" }], grants: [{ grant: "cli/db", gone: true }] });
    expect((await db.query("select 1 from pg_database where datname = $1", [b.database])).rowCount).toBe(0);
    await waitFor("cli to have no state", async () => ((await meshctl(["status", "cli"])).code === 3 ? true : undefined), 15_000);

    const dir = scratchDir("mesh-delete-");
    const f = join(dir, "m.yaml");
    writeFileSync(f, "kind: Module\nname: clif\nparts: [{ name: api, node: node-a }]\nrequires: [{ name: key, kind: secret }]\n");
    expect((await meshctl(["apply", "-f", f])).code).toBe(0);
    await mesh.waitForState("clif", "Ready");
    const byFile = await meshctl(["delete", "-f", f]);
    expect(byFile.code, byFile.stderr).toBe(0);
    // What happened to the grant is said: gone by the end, or (its agent slower than the exit,
    // as in a full CI run) revoked with the binding's removal named as what is left to do.
    expect(byFile.stdout).toMatch(/clif\/key: revoked at its provider/);
    await waitFor("clif to have no state", async () => ((await meshctl(["status", "clif"])).code === 3 ? true : undefined), 15_000);
  });

  it("refuses what it cannot do, with the reason: wrong usage exits 2, a protected or missing one 1, and nothing is deleted", async () => {
    await mesh.apply([module("mesh", [{ name: "records-key", kind: "secret" }])]);
    await mesh.waitForState("mesh", "Ready");
    expect((await meshctl(["delete", "modle", "x"])).code).toBe(2);
    expect((await meshctl(["delete"])).code).toBe(2);
    const missing = await meshctl(["delete", "module", "nosuch"]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain("there is no module nosuch");
    const protectedOne = await meshctl(["delete", "module", "mesh"]);
    expect(protectedOne.code).toBe(1);
    expect(protectedOne.stderr).toMatch(/control plane.*refused without --force/);
    expect(protectedOne.stderr).toContain("refused: nothing was deleted.");
    expect((await mesh.moduleStatus("mesh"))?.state).toBe("Ready");
  });
});

describe("a holder that never comes back", () => {
  it("meshctl rotate --evict commits a Stalled rotation without it, and names it in the record (meshctl trace) and in its output", async () => {
    const rotator = await startRotator({
      store: mesh.store,
      masterKey: mesh.masterKey,
      log: createLogger("rotator", { destination: mesh.logs, level: "debug" }),
      env: adminEnv(db),
      sweepMs: 300,
    });
    try {
      // Part away runs on node-z: its agent takes generation 1, then stops for good.
      const zRoot = scratchDir("mesh-node-z-");
      const z = await startAgent({ store: mesh.store, node: "node-z", bindingsRoot: zRoot, log: createLogger("agent", { destination: mesh.logs }) });
      await mesh.apply([
        module(
          "evict",
          [{ name: "key", kind: "secret" }],
          [
            { name: "api", node: "node-a", installed: true },
            { name: "away", node: "node-z", installed: true },
          ],
        ),
      ]);
      await mesh.waitForState("evict", "Ready", 20_000);
      await z.stop();
      const before = read(join(partDir("evict", "api"), "key"), "value");
      const started = await meshctlIn(["rotate", "evict/key", "--timeout", "1s", "--wait"]);
      expect(started.code, started.stderr).toBe(8);
      expect(started.stdout).toContain("node-z/away");
      const r = await meshctlIn(["rotate", "evict/key", "--evict", "node-z/away"]);
      expect(r.code, r.stderr + r.stdout).toBe(0);
      expect(r.stdout).toContain("evicted node-z/away from rotation evict/key#2");
      expect(r.stdout).toContain("Committed");
      const json = await meshctlIn(["trace", "evict/key", "--json"]);
      const trace = JSON.parse(json.stdout) as { state: string; holders: Array<{ holder: string; evicted?: unknown; confirmed: unknown }> };
      expect(trace.state).toBe("Committed");
      expect(trace.holders.find((h) => h.holder === "node-z/away")?.evicted).toBeTruthy();
      expect(trace.holders.find((h) => h.holder === "node-a/api")?.confirmed).toBeTruthy();
      expect(read(join(partDir("evict", "api"), "key"), "value")).not.toBe(before);
      // Nothing runs any more: evicting again says so.
      const again = await meshctlIn(["rotate", "evict/key", "--evict", "node-z/away"]);
      expect(again.code).toBe(5);
      expect(again.stderr).toContain("no rotation of evict/key is running");
    } finally {
      await rotator.stop();
    }
  }, 90_000);
});

describe("meshctl revoke", () => {
  it("with one holder's agent stopped: after the grace the old credential fails (new logins and open sessions), the running holder is on k+1, the stopped one is named and takes k+1 when back", async () => {
    const rotator = await startRotator({
      store: mesh.store,
      masterKey: mesh.masterKey,
      log: createLogger("rotator", { destination: mesh.logs }),
      env: adminEnv(db),
      sweepMs: 200,
    });
    const zRoot = scratchDir("mesh-node-z-");
    let z = await startAgent({ store: mesh.store, node: "node-z", bindingsRoot: zRoot, log: createLogger("agent", { destination: mesh.logs }) });
    try {
      const parts: ModuleDoc["parts"] = [
        { name: "api", node: "node-a", installed: true },
        { name: "away", node: "node-z", installed: true },
      ];
      await mesh.apply([module("leak", [{ name: "db", kind: "postgres.database" }], parts)]);
      await mesh.waitForState("leak", "Ready", 20_000);
      const old = dbBinding("leak", "api");
      // An open session with the old credential, and a holder that queries every 50 ms with what its binding holds.
      const session = new pg.Client({ host: db.host, port: db.port, user: old.user, password: old.password, database: old.database });
      await session.connect();
      session.on("error", () => undefined);
      await z.stop();
      let queries = 0;
      let failed = 0;
      let running = true;
      const holder = (async () => {
        while (running) {
          queries++;
          if (await login(dbBinding("leak", "api"))) failed++;
          await new Promise((r) => setTimeout(r, 50));
        }
      })();
      const r = await meshctlIn(["revoke", "leak/db", "--grace", "1s", "--reason", "leaked in a paste", "--json"]);
      running = false;
      await holder;
      expect(r.code, r.stderr).toBe(0);
      const out = JSON.parse(r.stdout) as { state: string; lockedOut: string[]; from: number; to: number };
      expect(out).toMatchObject({ state: "Committed", lockedOut: ["node-z/away"], from: 1, to: 2 });
      // The old credential is gone: a new login fails, and so does the session that was open.
      expect(await login(old)).toMatch(/not permitted to log in|password authentication failed/);
      await expect(session.query("select 1")).rejects.toThrow();
      await session.end().catch(() => undefined);
      // The running holder moved to k+1 by itself; failed queries are counted (the aim is none).
      expect(await login(dbBinding("leak", "api"))).toBeUndefined();
      expect(dbBinding("leak", "api").password).not.toBe(old.password);
      console.log(`revoke: the running holder made ${queries} queries during the revocation, ${failed} failed`);
      expect(failed).toBe(0);
      // Recorded: who, when, why, and who was locked out.
      const g = (await mesh.grant("leak", "db"))!;
      expect(g.revocations).toEqual([
        expect.objectContaining({ rotation: "leak/db#2", generation: 1, reason: "leaked in a paste", lockedOut: ["node-z/away"] }),
      ]);
      expect(g.revocations![0]!.by).toMatch(/@/);
      // The stopped holder takes k+1 when its agent returns.
      z = await startAgent({ store: mesh.store, node: "node-z", bindingsRoot: zRoot, log: createLogger("agent", { destination: mesh.logs }) });
      await waitFor(
        "node-z to hold generation 2",
        async () => ((await mesh.grant("leak", "db"))?.holders["node-z/away"]?.generation === 2 ? true : undefined),
        20_000,
      );
      expect(await login(dbBinding("leak", "api"))).toBeUndefined();
    } finally {
      await z.stop();
      await rotator.stop();
    }
  }, 90_000);
});

describe("meshctl revoke during a rotation", () => {
  it("supersedes it: k and the staged k+1 both stop working at the grace, k+2 goes out, and the running holder is on it", async () => {
    const rotator = await startRotator({
      store: mesh.store,
      masterKey: mesh.masterKey,
      log: createLogger("rotator", { destination: mesh.logs }),
      env: adminEnv(db),
      sweepMs: 200,
    });
    const zRoot = scratchDir("mesh-node-z-");
    const z = await startAgent({ store: mesh.store, node: "node-z", bindingsRoot: zRoot, log: createLogger("agent", { destination: mesh.logs }) });
    try {
      const parts: ModuleDoc["parts"] = [
        { name: "api", node: "node-a", installed: true },
        { name: "away", node: "node-z", installed: true },
      ];
      await mesh.apply([module("sup", [{ name: "db", kind: "postgres.database" }], parts)]);
      await mesh.waitForState("sup", "Ready", 20_000);
      const k = dbBinding("sup", "api");
      await z.stop();
      // A rotation that waits for node-z, which is away: k+1 is staged and node-a has it.
      const started = await meshctlIn(["rotate", "sup/db", "--timeout", "10m"]);
      expect(started.code, started.stderr).toBe(0);
      await waitFor("node-a on generation 2", () => (dbBinding("sup", "api").password !== k.password ? true : undefined), 15_000);
      const k1 = dbBinding("sup", "api");
      const r = await meshctlIn(["revoke", "sup/db", "--grace", "500ms", "--reason", "leaked during a rotation", "--json"]);
      expect(r.code, r.stderr).toBe(0);
      expect(JSON.parse(r.stdout)).toMatchObject({ rotation: "sup/db#3", state: "Committed", from: 1, to: 3, lockedOut: ["node-z/away"] });
      expect(await login(k)).toMatch(/not permitted to log in|password authentication failed/);
      expect(await login(k1)).toMatch(/not permitted to log in|password authentication failed/);
      await waitFor(
        "node-a on generation 3",
        async () => ((await mesh.grant("sup", "db"))?.holders["node-a/api"]?.generation === 3 ? true : undefined),
        15_000,
      );
      expect(await login(dbBinding("sup", "api"))).toBeUndefined();
      const g = (await mesh.grant("sup", "db"))!;
      expect(g.generation).toBe(3);
      expect(g.revocations?.at(-1)).toMatchObject({ rotation: "sup/db#3", reason: "leaked during a rotation" });
    } finally {
      await rotator.stop();
    }
  }, 90_000);
});

describe("history that ends", () => {
  it("the store keeps the last generations of a credential, purging older ones at each commit (but never the current one)", async () => {
    const rotator = await startRotator({
      store: mesh.store,
      masterKey: mesh.masterKey,
      log: createLogger("rotator", { destination: mesh.logs }),
      env: adminEnv(db),
      sweepMs: 300,
      credentialHistory: 2,
    });
    try {
      await mesh.apply([module("hist", [{ name: "key", kind: "secret" }])]);
      await mesh.waitForState("hist", "Ready");
      for (let to = 2; to <= 4; to++) {
        const r = await meshctlIn(["rotate", "hist/key", "--wait"]);
        expect(r.code, r.stderr).toBe(0);
        await waitFor(`generation ${to} committed`, async () => ((await mesh.grant("hist", "key"))?.generation === to ? true : undefined), 15_000);
      }
      const kept = await waitFor(
        "the store to hold generations 3 and 4 only",
        async () => {
          const gens: number[] = [];
          for await (const k of await mesh.store.kv.credentials.keys(keys.credentialsOf("hist", "key"))) gens.push(Number(/\.g(\d+)$/.exec(k)![1]));
          return gens.sort().join(",") === "3,4" ? gens : undefined;
        },
        10_000,
      );
      expect(kept).toHaveLength(2);
      // Purged, not deleted over history: no revision of generation 1 or 2 is readable.
      for (const g of [1, 2]) {
        for await (const e of await mesh.store.kv.credentials.history({ key: keys.credential("hist", "key", g) })) expect(e.operation).not.toBe("PUT");
      }
      expect(existsSync(join(partDir("hist", "api"), "key", "value"))).toBe(true);
    } finally {
      await rotator.stop();
    }
  }, 90_000);
});

describe("the resolver and an agent SIGKILLed in the middle of a deletion", () => {
  const repo = fileURLToPath(new URL("..", import.meta.url));
  const output: string[] = [];
  const spawnService = (service: string, env: NodeJS.ProcessEnv) => {
    const child = spawn(process.execPath, [join(repo, "services", service, "dist", "main.js")], {
      env: { ...process.env, NATS_URL: mesh.nats.url, MESH_LOG_LEVEL: "warn", MESH_NATS_CREDENTIALS: "", ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    child.stdout!.on("data", (d: Buffer) => output.push(`${service}: ${d.toString()}`));
    child.stderr!.on("data", (d: Buffer) => output.push(`${service}: ${d.toString()}`));
    return child;
  };
  const kill = async (child: ReturnType<typeof spawn>) => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill("SIGKILL");
    await new Promise((r) => child.once("exit", r));
  };

  it("a fresh resolver and a fresh agent finish it: nothing is left that logs in, no file on the node, no value in the store", async () => {
    // node-q's agent runs as a process of its own; the resolver too, in place of the test's.
    const qRoot = scratchDir("mesh-node-q-");
    let agent = spawnService("agent", { MESH_NODE: "node-q", MESH_BINDINGS_ROOT: qRoot });
    await mesh.resolver.stop();
    const resolver = spawnService("resolver", {});
    try {
      const parts: ModuleDoc["parts"] = [{ name: "api", node: "node-q", installed: true }];
      await waitFor(
        "the resolver process to answer",
        async () =>
          (
            await mesh
              .apply([
                module(
                  "crash",
                  [
                    { name: "db", kind: "postgres.database", deletionPolicy: "Delete" },
                    { name: "key", kind: "secret" },
                  ],
                  parts,
                ),
              ])
              .catch(() => undefined)
          )?.ok
            ? true
            : undefined,
        20_000,
        200,
      );
      await mesh.waitForState("crash", "Ready", 40_000);
      const dir = join(qRoot, "crash", "api");
      const b = { user: read(join(dir, "db"), "username"), password: read(join(dir, "db"), "password"), database: read(join(dir, "db"), "database") };
      // The agent dies first (its node's files wait for it); the resolver right after it accepted the delete, perhaps before it marked the grants.
      await kill(agent);
      expect((await del({ documents: [{ kind: "Module", name: "crash" }] })).ok).toBe(true);
      await kill(resolver);
      // The resolver comes back (in the test process), the agent after a while: meanwhile status names the node.
      mesh.resolver = await startResolver({ store: mesh.store, log: createLogger("resolver", { destination: mesh.logs, level: "debug" }), env: adminEnv(db) });
      const waiting = await waitFor(
        "the deletion to wait for node-q",
        async () => {
          const s = await mesh.moduleStatus("crash");
          return s?.state === "Deleting" && s.message.includes("node node-q") ? s : undefined;
        },
        20_000,
      );
      expect(waiting.message).toContain("removing part api's binding from node node-q");
      expect(await login(b)).toMatch(/does not exist|password authentication failed|not permitted/);
      agent = spawnService("agent", { MESH_NODE: "node-q", MESH_BINDINGS_ROOT: qRoot });
      await waitFor("the module to have no state", async () => ((await mesh.moduleStatus("crash")) ? undefined : true), 30_000);
      expect(existsSync(join(dir, "db"))).toBe(false);
      expect(existsSync(join(dir, "key"))).toBe(false);
      expect(await storedRevisions("crash", "db")).toBe(0);
      expect(await storedRevisions("crash", "key")).toBe(0);
      expect((await db.query("select 1 from pg_database where datname = $1", [b.database])).rowCount).toBe(0);
    } catch (e) {
      throw new Error(`${String(e)}\n${output.join("").slice(-4000)}`, { cause: e });
    } finally {
      await kill(agent);
      await kill(resolver);
    }
  }, 120_000);
});

describe("a provisioner SIGKILLed in the middle of taking a grant back", () => {
  const main = join(fileURLToPath(new URL("..", import.meta.url)), "services", "provisioner", "dist", "main.js");

  for (const step of ["Revoked", "Purged"] as const) {
    it(`after ${step}: a fresh provisioner finishes it, and nothing is left that logs in`, async () => {
      const name = `kill-${step.toLowerCase()}`;
      await mesh.provisioner.stop();
      const child = spawn(process.execPath, [main], {
        env: {
          ...adminEnv(db),
          NATS_URL: mesh.nats.url,
          MESH_MASTER_KEY: mesh.masterKey.key.toString("hex"),
          MESH_PROVISIONER_TEST_PAUSE_AFTER: step,
          MESH_LOG_LEVEL: "warn",
        },
        stdio: ["ignore", "pipe", "pipe"],
      });
      let out = "";
      child.stdout!.on("data", (b: Buffer) => (out += b.toString()));
      child.stderr!.on("data", (b: Buffer) => (out += b.toString()));
      let b: ReturnType<typeof dbBinding>;
      try {
        await mesh.apply([module(name, [{ name: "db", kind: "postgres.database", deletionPolicy: "Delete" }])]);
        await mesh.waitForState(name, "Ready", 20_000);
        b = dbBinding(name, "api");
        expect((await del({ documents: [{ kind: "Module", name }] })).ok).toBe(true);
        await waitFor(`the provisioner to freeze after ${step}`, () => out.includes(`TEST-HOOK paused-after ${step}`), 20_000);
        child.kill("SIGKILL");
        await new Promise((r) => child.once("exit", r));
      } finally {
        if (child.exitCode === null) child.kill("SIGKILL");
      }
      // A fresh one picks the grant up where it was (its durable consumer redelivers it).
      mesh.provisioner = await startProvisioner({
        store: mesh.store,
        masterKey: mesh.masterKey,
        log: createLogger("provisioner", { destination: mesh.logs, level: "debug" }),
        env: adminEnv(db),
      });
      await waitFor(`module ${name} to have no state`, async () => ((await mesh.moduleStatus(name)) ? undefined : true), 30_000);
      expect(await mesh.grant(name, "db")).toBeUndefined();
      expect(await storedRevisions(name, "db")).toBe(0);
      expect(existsSync(join(partDir(name, "api"), "db"))).toBe(false);
      expect((await db.query("select 1 from pg_database where datname = $1", [b.database])).rowCount).toBe(0);
      expect(await login(b)).toMatch(/does not exist|password authentication failed|not permitted/);
    }, 90_000);
  }
});
