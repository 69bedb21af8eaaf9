/**
 * A node that lost what its agent wrote gets it back without a rotation: the bindings root
 * emptied while the agent runs is written again within one probe interval, and one emptied
 * while the agent was stopped is written again when it starts; the generation stays, the
 * receipt and the grant's `Delivered` say it was written again, and the probes that follow
 * log in with it. Against a whole mesh on its own nats-server.
 */
import { existsSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DeliveryReceipt, getCondition, keys, type ModuleDoc } from "@mesh/shared";
import { readJson } from "@mesh/shared/runtime";
import { createLogger } from "@mesh/shared/service";
import { startAgent, type Agent } from "@mesh/agent";
import { startTestMesh, type TestMesh } from "./mesh.js";
import { waitFor } from "./harness/wait.js";

const PROBE_MS = 300;
let mesh: TestMesh;
const agents: Agent[] = [];

beforeAll(async () => {
  mesh = await startTestMesh({ nodes: [] });
});

afterAll(async () => {
  for (const a of agents) await a.stop();
  await mesh?.stop();
});

/** The agent of `node`, writing under the mesh's bindings root, probing every {@link PROBE_MS}. */
async function agentOf(node: string): Promise<Agent> {
  const a = await startAgent({
    store: mesh.store,
    node,
    bindingsRoot: join(mesh.bindingsRoot, node),
    log: createLogger("agent", { destination: mesh.logs, level: "debug" }),
    probeIntervalMs: PROBE_MS,
  });
  agents.push(a);
  return a;
}

/** Module `name`, part api on `node`, requiring one secret `key` (whose env maps VALUE). */
const module = (name: string, node: string): ModuleDoc => ({
  kind: "Module",
  name,
  parts: [{ name: "api", node, installed: true }],
  requires: [{ name: "key", kind: "secret", env: { SECRET_VALUE: "value" } }],
});

const valueFile = (node: string, name: string) => join(mesh.bindingsRoot, node, name, "api", "key", "value");

/** `name` applied and Ready with its part on `node`; its secret's value. */
async function ready(name: string, node: string): Promise<string> {
  expect((await mesh.apply([module(name, node)])).ok).toBe(true);
  await mesh.waitForState(name, "Ready");
  await waitFor(`${name}'s value on ${node}'s disk`, () => existsSync(valueFile(node, name)));
  return readFileSync(valueFile(node, name), "utf8");
}

/** The value back on disk, the same generation, and said so by the receipt and the grant. */
async function writtenAgain(node: string, name: string, value: string): Promise<void> {
  await waitFor(
    `${name}'s value back on ${node}'s disk`,
    () => existsSync(valueFile(node, name)) && readFileSync(valueFile(node, name), "utf8") === value,
    10_000,
  );
  expect(readFileSync(join(mesh.bindingsRoot, node, name, "api.env"), "utf8")).toContain(`SECRET_VALUE='${value}'`);
  // The receipt is written once the files are: waited for, not read at once.
  const receipt = await waitFor("the receipt to say it was written again", async () => {
    const r = (await readJson(mesh.store.kv.receipts, keys.receipt(node, name, "key", "api"), DeliveryReceipt))?.value;
    return r?.restored ? r : undefined;
  });
  expect(receipt).toMatchObject({ generation: 1, restored: { generation: 1 } });
  const g = await waitFor("the grant to say it was written again", async () => {
    const g = await mesh.grant(name, "key");
    return g?.holders[`${node}/api`]?.restoredAt ? g : undefined;
  });
  expect(g.generation).toBe(1);
  expect(getCondition(g.conditions, "Delivered")).toMatchObject({ status: "True" });
  expect(getCondition(g.conditions, "Delivered")?.message).toContain(`(written again, the node having lost it: api@${node} at `);
  expect(mesh.logs.text).toContain(`the binding of ${name}/key for part api was gone from this node`);
}

describe("a node that lost its bindings", () => {
  it("gets them back within a probe interval while its agent runs, at the same generation", async () => {
    await agentOf("node-r");
    const value = await ready("lost-running", "node-r");
    rmSync(join(mesh.bindingsRoot, "node-r"), { recursive: true, force: true });
    await writtenAgain("node-r", "lost-running", value);
  });

  it("gets them back when its agent starts again after they were lost while it was stopped", async () => {
    const first = await agentOf("node-s");
    const value = await ready("lost-stopped", "node-s");
    await first.stop();
    rmSync(join(mesh.bindingsRoot, "node-s"), { recursive: true, force: true });
    // A long probe interval: only the look at start can bring them back in time.
    const again = await startAgent({
      store: mesh.store,
      node: "node-s",
      bindingsRoot: join(mesh.bindingsRoot, "node-s"),
      log: createLogger("agent", { destination: mesh.logs, level: "debug" }),
      probeIntervalMs: 600_000,
    });
    agents.push(again);
    await writtenAgain("node-s", "lost-stopped", value);
  });
});
