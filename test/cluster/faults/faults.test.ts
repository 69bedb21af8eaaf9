/**
 * The longer faults (npm run test:faults), on the same mesh as the CI cluster test: the meta
 * leader killed during a burst of applies, one server stopped for a minute while work goes on,
 * the whole cluster restarted, and service instances SIGKILLed while a rotation waits for its
 * holders and while modules are being provisioned. After each: every module Ready within 30 s
 * of the fault ending, holders querying every 50 ms saw no failed login, and the store's
 * history of every grant touched is consistent. Each prints its time to resume.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
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
  type HolderQueries,
  type MeshOnCluster,
} from "../mesh-on-cluster.js";
import { waitFor } from "../../harness/wait.js";
import { readHolderAcks } from "@mesh/shared";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const secretModule = (name: string) => ({ kind: "Module", name, parts: [{ name: "app", node: "node-a" }], requires: [{ name: "token", kind: "secret" }] });

describe("faults on the mesh on a three-server cluster", () => {
  let t: MeshOnCluster;
  let holders: HolderQueries;
  const modules: string[] = [];

  beforeAll(async () => {
    t = await startMeshWithApp();
    modules.push("app");
    holders = queryEvery50ms(t.cluster, [
      { holder: "node-a/api", dir: bindingDir(t.mesh, "node-a", "app", "api", "bus") },
      { holder: "node-b/worker", dir: bindingDir(t.mesh, "node-b", "app", "worker", "bus") },
    ]);
  }, 300_000);
  afterAll(async () => {
    await holders?.stop();
    await t?.stop();
  });

  /** What every fault ends with: all modules Ready within 30 s, no failed login, consistent history. */
  async function resumed(what: string, faultEnded: number): Promise<void> {
    await allReady(t.store, modules, 30_000);
    const ms = Date.now() - faultEnded;
    printResume(what, ms);
    expect(ms).toBeLessThan(30_000);
    expect(holders.refused, JSON.stringify(holders.refused)).toEqual([]);
    expect(await grantInvariants(t.store, t.cluster, "app", "bus")).toEqual([]);
    for (const m of modules.filter((x) => x !== "app")) expect(await grantInvariants(t.store, t.cluster, m, "token"), m).toEqual([]);
  }

  it("a burst of applies survives SIGKILL of the meta leader", async () => {
    const burst = Array.from({ length: 20 }, (_, i) => `burst-${i}`);
    modules.push(...burst);
    const applying = Promise.all(burst.map((m) => applyDocs(t.nc, [secretModule(m)])));
    // The fault lands with the burst in flight: 300 ms into it.
    await sleep(300);
    const meta = await t.cluster.metaLeader();
    await meta.kill();
    // Down for 3 s.
    await sleep(3_000);
    await meta.restart();
    const ended = Date.now();
    await applying;
    await resumed(`meta leader ${meta.name} killed during a burst of 20 applies`, ended);
  });

  it("one server stopped for a minute while modules are applied and a rotation runs, then brought back", async () => {
    const down = await t.cluster.metaLeader();
    await down.stop();
    const stoppedAt = Date.now();
    const from = await generationOf(t.store, "app", "bus");
    const during = ["minute-0", "minute-1", "minute-2"];
    modules.push(...during);
    for (const m of during) await applyDocs(t.nc, [secretModule(m)]);
    const r = await t.mesh.meshctl(["rotate", "app/bus", "--wait", "--timeout", "90s", "--json"]);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ state: "Committed", from, to: from + 1 });
    await allReady(t.store, modules, 60_000);
    const left = 60_000 - (Date.now() - stoppedAt);
    if (left > 0) await sleep(left);
    await down.restart();
    const ended = Date.now();
    await resumed(`${down.name} stopped for a minute`, ended);
    // Not timed: the server that was away follows the meta leader again before the next fault.
    await t.cluster.waitMeta();
  });

  it("the whole cluster restarted", async () => {
    await Promise.all(t.cluster.members.map((m) => m.stop()));
    // All down for 2 s.
    await sleep(2_000);
    for (const m of t.cluster.members) await m.restart();
    const ended = Date.now();
    // Nothing waited for: the apply is sent again until a resolver takes it, as an operator's client does.
    modules.push("after-restart");
    await applyDocs(t.nc, [secretModule("after-restart")]);
    await resumed("the whole cluster restarted", ended);
    const from = await generationOf(t.store, "app", "bus");
    const r = await t.mesh.meshctl(["rotate", "app/bus", "--wait", "--timeout", "60s", "--json"]);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ state: "Committed", to: from + 1 });
  });

  it("each service instance SIGKILLed while a rotation waits for a holder, and while modules are provisioned", async () => {
    for (const service of TWICE) {
      for (const which of ["meshctl's", "second"] as const) {
        const from = await generationOf(t.store, "app", "bus");
        const agentB = t.mesh.servicePid("agent", { MESH_NODE: "node-b" })!;
        process.kill(agentB, "SIGSTOP");
        let ended = 0;
        try {
          const rotate = t.mesh.meshctl(["rotate", "app/bus", "--wait", "--timeout", "90s", "--json"]);
          await waitFor(
            "the rotation waiting for node-b",
            async () => {
              const r = await rotationOf(t.store, "app", "bus");
              if (!r || r.to !== from + 1 || r.state === "Committed" || r.broadcasts.length === 0) return false;
              // Who confirmed is JetStream's while it runs: each holder's consumer's ack floor.
              return (await readHolderAcks(t.store.jsm, r)).some((h) => h.holder === "node-a/api" && h.acked);
            },
            60_000,
          );
          // Work for the provisioner meanwhile: a module being provisioned when its instance dies.
          const name = `kill-${service}-${which === "second" ? 2 : 1}`;
          modules.push(name);
          const applying = applyDocs(t.nc, [secretModule(name)]);
          const pid = which === "second" ? t.second.pid(service) : t.mesh.servicePid(service);
          expect(pid, `${which} ${service}`).toBeDefined();
          process.kill(pid!, "SIGKILL");
          await applying;
          process.kill(agentB, "SIGCONT");
          ended = Date.now();
          const r = await rotate;
          expect(r.code, `${which} ${service} killed: ${r.stderr}`).toBe(0);
          expect(JSON.parse(r.stdout)).toMatchObject({ state: "Committed", from, to: from + 1 });
        } finally {
          if (!ended) process.kill(agentB, "SIGCONT");
        }
        await resumed(`${which} ${service} SIGKILLed while a rotation waited for a holder`, ended);
        // The supervisor restarts it after a second; a second kill within 10 s of a start counts as a failed start.
        await waitFor(`${which} ${service} running again`, () => (which === "second" ? t.second.pid(service) : t.mesh.servicePid(service)), 30_000);
        await sleep(10_000);
      }
    }
  });
});
