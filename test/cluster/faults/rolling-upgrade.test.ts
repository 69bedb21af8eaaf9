/**
 * A rolling upgrade on the mesh on a three-server cluster: every service instance (both of
 * each service, then each node's agent) replaced one at a time, the way an operator restarts
 * units onto a new build (SIGTERM, the supervisor starts the program again, the next waits
 * until it is connected), while holders query every 50 ms, modules are applied, and a rotation
 * runs (held open by node-b's agent until its own turn comes). Nothing is lost: every module
 * applied during it is Ready, the rotation commits once, after every holder confirmed, no
 * login fails, and the store's history is consistent.
 *
 * First with the same build started again (the replacement alone), then from the previous
 * release (the CHANGELOG names it and its commit; harness/previous-release.ts builds it): the
 * mesh bootstrapped by that release's meshctl, each service's program replaced by this tree's
 * build before its instances restart, as an operator installs a release and restarts the units;
 * every instance answers with the release it runs. Then one service is rolled back to the
 * previous release beside the others, and a rotation still commits.
 */
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  NODES,
  TWICE,
  allReady,
  applyDocs,
  bindingDir,
  generationOf,
  grantInvariants,
  printResume,
  queryEvery50ms,
  rotationOf,
  startMeshWithApp,
  type MeshOnCluster,
} from "../mesh-on-cluster.js";
import { waitFor } from "../../harness/wait.js";
import { buildPreviousRelease, type PreviousRelease } from "../../harness/previous-release.js";

const secretModule = (name: string) => ({ kind: "Module", name, parts: [{ name: "app", node: "node-a" }], requires: [{ name: "token", kind: "secret" }] });

/** Replaces one instance: SIGTERM, then waits for the supervisor's new process, connected. */
async function replace(t: MeshOnCluster, what: string, pid: () => number | undefined, connection: string, count: number): Promise<void> {
  const old = pid();
  expect(old, what).toBeDefined();
  process.kill(old!, "SIGTERM");
  await waitFor(
    `${what} replaced`,
    () => {
      const p = pid();
      return p !== undefined && p !== old;
    },
    60_000,
    100,
  );
  await waitFor(
    `${what} connected again`,
    async () => (await t.mesh.connections()).filter((c) => c.name === connection).length === count || undefined,
    60_000,
    200,
  );
  // The supervisor counts an exit within 10 s of a start as a failed start: let this one settle.
  await new Promise((r) => setTimeout(r, 10_000));
}

/**
 * Replaces every instance one at a time (both of each service, then each node's agent), calling
 * `install` with each service's name before its instances are replaced, while holders query
 * every 50 ms, modules are applied, and a rotation runs, held open by node-b's agent until its
 * own turn comes. Checks that nothing was lost: every module applied meanwhile Ready, the
 * rotation committed once every holder confirmed, no login refused, the store's history whole.
 */
async function rollEveryInstance(t: MeshOnCluster, what: string, install: (service: string) => void): Promise<void> {
  const holders = queryEvery50ms(t.cluster, [
    { holder: "node-a/api", dir: bindingDir(t.mesh, "node-a", "app", "api", "bus") },
    { holder: "node-b/worker", dir: bindingDir(t.mesh, "node-b", "app", "worker", "bus") },
  ]);
  const modules = ["app"];
  let stopWork = false;
  const work = (async () => {
    for (let i = 0; !stopWork; i++) {
      modules.push(`${what}-${i}`);
      await applyDocs(t.nc, [secretModule(`${what}-${i}`)]);
      await new Promise((r) => setTimeout(r, 500));
    }
  })();
  const from = await generationOf(t.store, "app", "bus");
  const agentB = t.mesh.servicePid("agent", { MESH_NODE: "node-b" })!;
  process.kill(agentB, "SIGSTOP");
  let continued = false;
  try {
    const rotate = t.mesh.meshctl(["rotate", "app/bus", "--wait", "--timeout", "240s", "--json"]);
    await waitFor(
      "the rotation waiting for node-b",
      async () => {
        const r = await rotationOf(t.store, "app", "bus");
        return r && r.to === from + 1 && r.state !== "Committed";
      },
      60_000,
    );

    for (const s of TWICE) {
      install(s);
      await replace(t, `meshctl's ${s}`, () => t.mesh.servicePid(s), `mesh-${s}`, 2);
      await replace(t, `the second ${s}`, () => t.second.pid(s), `mesh-${s}`, 2);
    }
    install("agent");
    await replace(t, "node-a's agent", () => t.mesh.servicePid("agent", { MESH_NODE: "node-a" }), "mesh-agent", NODES.length);
    // node-b's agent, stopped all along, is replaced last: its new process confirms the rotation.
    process.kill(agentB, "SIGCONT");
    continued = true;
    await replace(t, "node-b's agent", () => t.mesh.servicePid("agent", { MESH_NODE: "node-b" }), "mesh-agent", NODES.length);
    const ended = Date.now();

    const r = await rotate;
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ state: "Committed", from, to: from + 1 });
    stopWork = true;
    await work;
    await allReady(t.store, modules, 30_000);
    printResume(`${what} of every instance`, Date.now() - ended);
  } finally {
    stopWork = true;
    if (!continued) process.kill(agentB, "SIGCONT");
    await holders.stop();
  }
  expect(holders.refused, JSON.stringify(holders.refused)).toEqual([]);
  expect(modules.length).toBeGreaterThan(10);
  expect(await grantInvariants(t.store, t.cluster, "app", "bus")).toEqual([]);
  for (const m of modules.filter((x) => x !== "app")) expect(await grantInvariants(t.store, t.cluster, m, "token"), m).toEqual([]);
}

/** The version each running instance of the mesh answers the micro protocol's PING with, by service: `{ "mesh-resolver": ["0.1.0", "0.1.0"], … }`. */
async function runningVersions(t: MeshOnCluster): Promise<Record<string, string[]>> {
  const by: Record<string, string[]> = {};
  for await (const m of await t.nc.requestMany("$SRV.PING", "", { maxWait: 2_000 })) {
    const { name, version } = m.json<{ name: string; version: string }>();
    (by[name] ??= []).push(version);
  }
  for (const v of Object.values(by)) v.sort();
  return by;
}

/** Every instance of every service (resolver, provisioner, verifier, rotator twice, each node's agent once) at `version`, but `except`'s at theirs. */
function allAt(version: string, except: Record<string, string> = {}): Record<string, string[]> {
  const at = (service: string) => except[service] ?? version;
  return {
    ...Object.fromEntries(TWICE.map((s) => [`mesh-${s}`, [at(s), at(s)]])),
    ...Object.fromEntries(NODES.map((n) => [`mesh-agent-${n}`, [at("agent")]])),
  };
}

describe("a rolling upgrade of the mesh on a three-server cluster", () => {
  let t: MeshOnCluster;

  beforeAll(async () => {
    t = await startMeshWithApp();
  }, 300_000);
  afterAll(async () => {
    await t?.stop();
  });

  it("replaces every instance one at a time while holders query and a rotation runs; nothing is lost", async () => {
    await rollEveryInstance(t, "restart", () => undefined);
  }, 600_000);
});

describe("an upgrade from the previous release on a three-server cluster", () => {
  let t: MeshOnCluster;
  let previous: PreviousRelease;
  const current = (JSON.parse(readFileSync(fileURLToPath(new URL("../../../services/resolver/package.json", import.meta.url)), "utf8")) as { version: string })
    .version;

  beforeAll(async () => {
    previous = buildPreviousRelease();
    t = await startMeshWithApp({ meshctl: previous.meshctl });
  }, 600_000);
  afterAll(async () => {
    await t?.stop();
    previous?.remove();
  });

  it("moves every instance from the previous release to this one, one at a time, while holders query and a rotation runs; then rolls one service back", async () => {
    expect(current).not.toBe(previous.version);
    expect(await runningVersions(t)).toEqual(allAt(previous.version));

    await rollEveryInstance(t, "upgrade", (s) => previous.install(s, "current"));
    expect(await runningVersions(t)).toEqual(allAt(current));

    // The verifier rolled back to the previous release, beside this release's other services: a rotation still commits, the holders never refused.
    previous.install("verifier", "previous");
    await replace(t, "meshctl's verifier", () => t.mesh.servicePid("verifier"), "mesh-verifier", 2);
    await replace(t, "the second verifier", () => t.second.pid("verifier"), "mesh-verifier", 2);
    expect(await runningVersions(t)).toEqual(allAt(current, { verifier: previous.version }));
    const holders = queryEvery50ms(t.cluster, [
      { holder: "node-a/api", dir: bindingDir(t.mesh, "node-a", "app", "api", "bus") },
      { holder: "node-b/worker", dir: bindingDir(t.mesh, "node-b", "app", "worker", "bus") },
    ]);
    try {
      const from = await generationOf(t.store, "app", "bus");
      const r = await t.mesh.meshctl(["rotate", "app/bus", "--wait", "--timeout", "120s", "--json"]);
      expect(r.code, r.stderr).toBe(0);
      expect(JSON.parse(r.stdout)).toMatchObject({ state: "Committed", from, to: from + 1 });
      await allReady(t.store, ["app"], 30_000);
    } finally {
      await holders.stop();
    }
    expect(holders.refused, JSON.stringify(holders.refused)).toEqual([]);
    expect(await grantInvariants(t.store, t.cluster, "app", "bus")).toEqual([]);
  }, 600_000);
});
