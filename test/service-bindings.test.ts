/**
 * A part's directory as a servicebinding.io reader sees it, on a real nats-server and a scram
 * PostgreSQL: `kube-service-bindings` pointed at `<bindings>/<node>/<module>/<part>` as
 * `SERVICE_BINDING_ROOT` right after a rotation returns the new password (which logs in) and
 * lists exactly one binding per requirement, with no env file, hidden directory or older
 * generation among them; and an agent started over a tree written by an agent before the
 * generations directory moves it over and leaves no stray file.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import pg from "pg";
import { Kinds, Rotation, RotationStates, keys, subjects, type ModuleDoc } from "@mesh/shared";
import { readJson } from "@mesh/shared/runtime";
import { createLogger } from "@mesh/shared/service";
import { CredentialStore } from "@mesh/providers";
import { bindingGeneration, partBindingsDir, partEnvFile, startAgent } from "@mesh/agent";
import type { Rotator } from "@mesh/rotator";
import { startPostgres, type Postgres } from "./harness/postgres.js";
import { startMeshRotator, startTestMesh, type TestMesh } from "./mesh.js";
import { waitFor } from "./harness/wait.js";
import { readAllBindings, readBindingFor } from "./harness/service-binding-reader.js";
import { adminEnv, harnessProvider } from "./fixtures.js";

const shop: ModuleDoc = {
  kind: "Module",
  name: "bshop",
  parts: [{ name: "api", node: "node-a", installed: true }],
  requires: [
    { name: "db", kind: Kinds.PostgresDatabase, parts: ["api"] },
    { name: "session-key", kind: Kinds.Secret, parts: ["api"] },
  ],
};

describe("a part's directory as SERVICE_BINDING_ROOT", () => {
  let db: Postgres;
  let mesh: TestMesh;
  let rotator: Rotator;

  beforeAll(async () => {
    db = await startPostgres();
    mesh = await startTestMesh({ nodes: ["node-a"], env: adminEnv(db) });
    rotator = await startMeshRotator(mesh, adminEnv(db));
  });
  afterAll(async () => {
    await rotator?.stop();
    await mesh?.stop();
    await db?.stop();
  });

  it("gives kube-service-bindings the new password right after a rotation, and one binding per requirement", async () => {
    expect((await mesh.apply([harnessProvider(db), shop])).ok).toBe(true);
    await mesh.waitForState("bshop", "Ready");
    const root = join(mesh.bindingsRoot, "node-a");
    const dir = partBindingsDir(root, "bshop", "api");
    await waitFor(
      "both bindings on disk",
      () => bindingGeneration(root, "bshop", "api", "db") === 1 && bindingGeneration(root, "bshop", "api", "session-key") === 1,
    );

    const reply = await mesh.nc
      .request(subjects.rotate, JSON.stringify({ grant: "bshop/db" }), { timeout: 15_000 })
      .then((m) => m.json<{ ok: boolean; error?: { message: string } }>());
    expect(reply).toMatchObject({ ok: true });
    await waitFor(
      "the rotation committed",
      async () => (await readJson(mesh.store.kv.rotations, keys.grant("bshop", "db"), Rotation))?.value.state === RotationStates.Committed,
      30_000,
    );
    // Right after: generation 1's directory is still kept for readers that were in it (the grace).
    expect(bindingGeneration(root, "bshop", "api", "db")).toBe(2);
    const generations = readdirSync(join(root, "bshop", ".api.generations"));
    expect(generations.filter((e) => e.startsWith("db-g1-"))).toHaveLength(1);

    const stored = await new CredentialStore(mesh.store.kv.credentials, mesh.masterKey).read("bshop", "db", 2);
    const newPassword = stored!.bindings!.password!;
    const typed = readBindingFor<pg.ClientConfig>(dir, "POSTGRESQL", "pg");
    expect(typed.password).toBe(newPassword);
    const all = readAllBindings(dir);
    expect(all.map((b) => b.type).sort()).toEqual(["postgresql", "secret"]);
    expect(all.find((b) => b.type === "postgresql")?.password).toBe(newPassword);
    expect(readdirSync(dir).sort()).toEqual(["db", "session-key"]);
    // The env file is beside the directory, not in it.
    expect(readFileSync(partEnvFile(root, "bshop", "api"), "utf8")).toContain("DB_PASSWORD=");

    // What the reader returned logs in.
    const client = new pg.Client({ ...typed, password: newPassword });
    await client.connect();
    expect((await client.query("select 1 as one")).rows).toEqual([{ one: 1 }]);
    await client.end();
  });

  it("moves a tree written by an agent before the generations directory over, leaving no stray file", async () => {
    const root = join(mesh.bindingsRoot, "node-old");
    const part = join(root, "legacy", "api");
    mkdirSync(join(part, ".key-g4-abcDEF"), { recursive: true });
    writeFileSync(join(part, ".key-g4-abcDEF", "type"), "secret");
    writeFileSync(join(part, ".key-g4-abcDEF", "value"), "v4");
    symlinkSync(".key-g4-abcDEF", join(part, "key"));
    writeFileSync(join(part, "part.env"), "KEY_VALUE='v4'\n");
    const agent = await startAgent({
      store: mesh.store,
      node: "node-old",
      bindingsRoot: root,
      graceMs: 300,
      log: createLogger("agent", { destination: mesh.logs, level: "debug" }),
    });
    try {
      expect(bindingGeneration(root, "legacy", "api", "key")).toBe(4);
      expect(readFileSync(join(part, "key", "value"), "utf8")).toBe("v4");
      expect(readFileSync(partEnvFile(root, "legacy", "api"), "utf8")).toContain("KEY_VALUE='v4'\n");
      expect(existsSync(join(part, "part.env"))).toBe(false);
      expect(mesh.logs.lines.some((l) => l.includes("moved the bindings of legacy/api to the current layout"))).toBe(true);
      await waitFor("the old generation directory removed after its grace", () => readdirSync(part).length === 1);
      expect(readdirSync(part)).toEqual(["key"]);
      const all = readAllBindings(part);
      expect(all).toEqual([{ type: "secret", value: "v4" }]);
    } finally {
      await agent.stop();
    }
  });
});
