/**
 * A node's agent partitioned from the cluster and reconnected, on the mesh on a three-server
 * cluster (npm run test:faults). node-b's agent is moved into a network namespace of its own
 * (harness/netns.ts, as test/reachability.test.ts does): the same program with the same
 * arguments and environment as meshctl's, whose only way to the cluster is a bridge per
 * member's client port. Closing the three bridges cuts it off for real (its connections are
 * ended, every reconnect is refused by the kernel); opening them again reconnects it. A rotation
 * of a grant node-b holds is started while it is cut off: it waits for node-b and retires
 * nothing, and commits once node-b is back. Outcomes as for every fault: every module Ready
 * within 30 s of the partition ending, consecutive generations with distinct values, unique
 * rotation ids, nothing retired before its holders confirmed, and holders querying every 50 ms
 * see no failed login. It prints the time to resume.
 */
import { closeSync, openSync, readFileSync, readlinkSync } from "node:fs";
import type { ChildProcess } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Rotation } from "@mesh/shared";
import {
  allReady,
  bindingDir,
  generationOf,
  grantInvariants,
  printResume,
  queryEvery50ms,
  rotationOf,
  rotationWaitingFor,
  startMeshWithApp,
  type MeshOnCluster,
} from "../mesh-on-cluster.js";
import { createNetns, type Bridge, type Netns } from "../../harness/netns.js";
import { waitFor } from "../../harness/wait.js";

/** How long node-b's agent stays cut off once the rotation waits for it. */
const PARTITION_MS = 20_000;

/** Whether process `pid` has ended (a zombie counts: its parent, stopped, has not reaped it yet). */
function ended(pid: number): boolean {
  try {
    return /^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return true;
  }
}

describe("a node's agent partitioned from the cluster and reconnected", () => {
  let t: MeshOnCluster;
  let ns: Netns | undefined;
  let agent: ChildProcess | undefined;
  let supervisorStopped = false;

  beforeAll(async () => {
    t = await startMeshWithApp();
  }, 300_000);
  afterAll(async () => {
    agent?.kill("SIGKILL");
    await ns?.close();
    // Supervising again, meshctl starts node-b's agent of its own once more (its exit is seen now).
    if (supervisorStopped) t.mesh.proc.kill("SIGCONT");
    await t?.stop();
  });

  it("a rotation started while node-b's agent is cut off waits for it, retires nothing, and commits once it is back", async () => {
    // node-b's agent as meshctl runs it: program, arguments, environment, directory.
    const pid = t.mesh.servicePid("agent", { MESH_NODE: "node-b" })!;
    expect(pid).toBeDefined();
    const argv = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").filter(Boolean);
    const env = Object.fromEntries(
      readFileSync(`/proc/${pid}/environ`, "utf8")
        .split("\0")
        .filter(Boolean)
        .map((e) => [e.slice(0, e.indexOf("=")), e.slice(e.indexOf("=") + 1)]),
    );
    const cwd = readlinkSync(`/proc/${pid}/cwd`);
    const ports = t.cluster.members.map((m) => Number(new URL(m.url).port));
    ns = await createNetns();
    const netns = ns;
    let bridges: Bridge[] = await Promise.all(ports.map((p) => netns.bridge(p)));
    // meshctl stops supervising (its services run on, logging to their files), so the agent it runs can go for good.
    t.mesh.proc.kill("SIGSTOP");
    supervisorStopped = true;
    process.kill(pid, "SIGKILL");
    await waitFor("meshctl's node-b agent to end", () => ended(pid), 10_000);
    const logFile = `${cwd}/.mesh/logs/agent-node-b-netns.log`;
    const log = openSync(logFile, "a");
    agent = netns.spawn(argv[0]!, argv.slice(1), { cwd, env, stdio: ["ignore", log, log] });
    closeSync(log);
    // Started, not only connected: a start-up cut off half-way is a start that failed (the agent exits; its supervisor starts it again).
    await waitFor("node-b's agent, in its namespace, started", () => readFileSync(logFile, "utf8").includes('"msg":"agent started"'), 60_000, 250).catch(
      (e: Error) => {
        throw new Error(`${e.message}\nits log:\n${readFileSync(logFile, "utf8").slice(-4_000)}`);
      },
    );
    await waitFor(
      "node-b's agent, in its namespace, connected",
      async () => (await t.mesh.connections()).filter((c) => c.name === "mesh-agent").length === 2,
      60_000,
      250,
    );

    const holders = queryEvery50ms(t.cluster, [
      { holder: "node-a/api", dir: bindingDir(t.mesh, "node-a", "app", "api", "bus") },
      { holder: "node-b/worker", dir: bindingDir(t.mesh, "node-b", "app", "worker", "bus") },
    ]);
    let partitionEnded = 0;
    try {
      const from = await generationOf(t.store, "app", "bus");
      // Cut off: every bridge closed, which ends the agent's connection; reconnects are refused inside.
      await Promise.all(bridges.map((b) => b.close()));
      bridges = [];
      for (const p of ports) expect(await netns.canConnect(p), `port ${p} from inside`).toBe(false);
      await waitFor(
        "node-b's agent gone from the cluster",
        async () => (await t.mesh.connections()).filter((c) => c.name === "mesh-agent").length === 1,
        60_000,
        250,
      );
      const cutAt = Date.now();

      const rotate = t.mesh.meshctl(["rotate", "app/bus", "--wait", "--timeout", "120s", "--json"]);
      const waiting = await rotationWaitingFor(t.store, "app", "bus", from, { confirmed: "node-a/api", missing: "node-b/worker" });
      expect(waiting.state).not.toBe("Committed");
      await new Promise((r) => setTimeout(r, Math.max(0, PARTITION_MS - (Date.now() - cutAt))));
      // Still waiting for node-b, and generation `from` not retired: node-b's holder logs in with it all along (holders.refused).
      expect((await rotationOf(t.store, "app", "bus"))?.state).not.toBe("Committed");

      // Reconnected: the bridges open again, and the agent's own reconnects find the cluster.
      bridges = await Promise.all(ports.map((p) => netns.bridge(p)));
      partitionEnded = Date.now();
      const r = await rotate;
      expect(r.code, r.stderr).toBe(0);
      expect(JSON.parse(r.stdout) as Rotation).toMatchObject({ state: "Committed", from, to: from + 1 });
      await allReady(t.store, ["app"], 30_000);
      const ms = Date.now() - partitionEnded;
      printResume(`node-b's agent partitioned from the cluster for ${Math.round((partitionEnded - cutAt) / 1000)} s during a rotation`, ms);
      expect(ms).toBeLessThan(30_000);
      await waitFor("node-b's holder on the new generation", () => generationOf(t.store, "app", "bus").then((g) => g === from + 1), 10_000);
      await new Promise((res) => setTimeout(res, 1_000));
    } finally {
      await holders.stop();
      if (!partitionEnded) for (const b of bridges) await b.close().catch(() => undefined);
    }
    expect(holders.refused, JSON.stringify(holders.refused)).toEqual([]);
    expect(holders.made).toBeGreaterThan(50);
    expect(await grantInvariants(t.store, t.cluster, "app", "bus")).toEqual([]);
  });
});
