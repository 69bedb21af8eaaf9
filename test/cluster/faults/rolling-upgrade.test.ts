/**
 * A rolling upgrade on the mesh on a three-server cluster: every service instance (both of
 * each service, then each node's agent) replaced one at a time, the way an operator restarts
 * units onto a new build (SIGTERM, the supervisor starts the program again, the next waits
 * until it is connected), while holders query every 50 ms, modules are applied, and a rotation
 * runs (held open by node-b's agent until its own turn comes). Nothing is lost: every module
 * applied during it is Ready, the rotation commits once, after every holder confirmed, no
 * login fails, and the store's history is consistent. The program started again is the same
 * build: what is shown is the replacement, not a change of version.
 */
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

const secretModule = (name: string) => ({ kind: "Module", name, parts: [{ name: "app", node: "node-a" }], requires: [{ name: "token", kind: "secret" }] });

describe("a rolling upgrade of the mesh on a three-server cluster", () => {
  let t: MeshOnCluster;

  beforeAll(async () => {
    t = await startMeshWithApp();
  }, 300_000);
  afterAll(async () => {
    await t?.stop();
  });

  it("replaces every instance one at a time while holders query and a rotation runs; nothing is lost", async () => {
    const holders = queryEvery50ms(t.cluster, [
      { holder: "node-a/api", dir: bindingDir(t.mesh, "node-a", "app", "api", "bus") },
      { holder: "node-b/worker", dir: bindingDir(t.mesh, "node-b", "app", "worker", "bus") },
    ]);
    const modules = ["app"];
    let stopWork = false;
    const work = (async () => {
      for (let i = 0; !stopWork; i++) {
        modules.push(`upgrade-${i}`);
        await applyDocs(t.nc, [secretModule(`upgrade-${i}`)]);
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

      /** Replaces one instance: SIGTERM, then waits for the supervisor's new process, connected. */
      const replace = async (what: string, pid: () => number | undefined, connection: string, count: number) => {
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
      };
      for (const s of TWICE) {
        await replace(`meshctl's ${s}`, () => t.mesh.servicePid(s), `mesh-${s}`, 2);
        await replace(`the second ${s}`, () => t.second.pid(s), `mesh-${s}`, 2);
      }
      await replace("node-a's agent", () => t.mesh.servicePid("agent", { MESH_NODE: "node-a" }), "mesh-agent", NODES.length);
      // node-b's agent, stopped all along, is replaced last: its new process confirms the rotation.
      process.kill(agentB, "SIGCONT");
      continued = true;
      await replace("node-b's agent", () => t.mesh.servicePid("agent", { MESH_NODE: "node-b" }), "mesh-agent", NODES.length);
      const ended = Date.now();

      const r = await rotate;
      expect(r.code, r.stderr).toBe(0);
      expect(JSON.parse(r.stdout)).toMatchObject({ state: "Committed", from, to: from + 1 });
      stopWork = true;
      await work;
      await allReady(t.store, modules, 30_000);
      printResume("rolling upgrade of every instance", Date.now() - ended);
    } finally {
      stopWork = true;
      if (!continued) process.kill(agentB, "SIGCONT");
      await holders.stop();
    }
    expect(holders.refused, JSON.stringify(holders.refused)).toEqual([]);
    expect(modules.length).toBeGreaterThan(10);
    expect(await grantInvariants(t.store, t.cluster, "app", "bus")).toEqual([]);
    for (const m of modules.filter((x) => x !== "app")) expect(await grantInvariants(t.store, t.cluster, m, "token"), m).toEqual([]);
  }, 600_000);
});
