/**
 * A part's `onRotate` names a hook its node's agent allows, end to end with the real agent
 * process (`services/agent/dist/main.js --allow-hook …`, started the way meshctl up starts it:
 * its NATS identity and the master key's location in its environment) on a test nats-server,
 * with the resolver, the provisioner and the rotator in-process:
 *
 * - an allowed hook runs at a rotation as `nobody`, with none of the agent's environment;
 * - a hook the node does not allow runs nothing: the rotation waits, and the grant says which
 *   hook, which node and how to allow it (in `meshctl status` too); once the agent is started
 *   with the hook, the rotation commits by itself.
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getCondition, HOOK_PATH, keys, Kinds, readHolderAcks, Rotation, RotationStates, subjects, type ModuleDoc } from "@mesh/shared";
import { readJson } from "@mesh/shared/runtime";
import { createLogger } from "@mesh/shared/service";
import { lookUpUser } from "@mesh/agent";
import { startRotator, type Rotator } from "@mesh/rotator";
import { startTestMesh, type TestMesh } from "../mesh.js";
import { waitFor } from "../harness/wait.js";

const repo = join(import.meta.dirname, "../..");
const agentMain = join(repo, "services/agent/dist/main.js");
const NODE = "node-a";

/** A module with one part on node-a whose onRotate names `hook`, and one secret. */
function moduleDoc(name: string, hook: string): ModuleDoc {
  return {
    kind: "Module",
    name,
    parts: [{ name: "api", node: NODE, installed: true, onRotate: hook }],
    requires: [{ name: "key", kind: Kinds.Secret, parts: ["api"] }],
  };
}

let mesh: TestMesh;
let rotator: Rotator;
let dir: string;
let out: string;
let script: string;
let bindings: string;
let agent: ChildProcess | undefined;
let agentLog = "";
// What meshctl up gives an agent: none of it may reach a hook.
const secretEnv = {
  MESH_NATS_USER: "agent-node-a",
  MESH_NATS_PASSWORD: `nats-${randomBytes(8).toString("hex")}`,
  MESH_MASTER_KEY: randomBytes(32).toString("hex"),
  MESH_MASTER_KEY_FILE: "/var/lib/mesh-test/master.key",
};

/** Starts the agent process of node-a allowing `hooks` (`NAME=COMMAND`), and waits until it consumes. */
async function startAgentProcess(hooks: string[]): Promise<void> {
  agentLog = "";
  agent = spawn(process.execPath, [agentMain, "--node", NODE, "--bindings", bindings, ...hooks.flatMap((h) => ["--allow-hook", h])], {
    env: { PATH: process.env.PATH, NATS_URL: mesh.nats.url, MESH_LOG_LEVEL: "info", ...secretEnv },
    stdio: ["ignore", "pipe", "pipe"],
  });
  for (const s of [agent.stdout!, agent.stderr!]) s.on("data", (b: Buffer) => (agentLog += b.toString()));
  await waitFor("the agent process to consume", () => agentLog.includes(`agent for node ${NODE} writing under`), 20_000).catch((e: Error) => {
    throw new Error(`${e.message}\nits output:\n${agentLog}`);
  });
}

async function stopAgentProcess(): Promise<void> {
  if (!agent || agent.exitCode !== null) return;
  const exited = new Promise((r) => agent!.once("exit", r));
  agent.kill("SIGTERM");
  await exited;
}

async function rotationOf(module: string): Promise<Rotation | undefined> {
  return (await readJson(mesh.store.kv.rotations, keys.grant(module, "key"), Rotation))?.value;
}

async function rotate(grant: string): Promise<void> {
  const reply = (await mesh.nc.request(subjects.rotate, JSON.stringify({ grant }), { timeout: 15_000 })).json<{ ok: boolean }>();
  expect(reply.ok).toBe(true);
}

/** The `KEY=value` lines a hook wrote with `env`. */
function envOf(file: string): Record<string, string> {
  return Object.fromEntries(
    readFileSync(file, "utf8")
      .trim()
      .split("\n")
      .map((l) => [l.slice(0, l.indexOf("=")), l.slice(l.indexOf("=") + 1)]),
  );
}

beforeAll(async () => {
  if (!existsSync(agentMain)) throw new Error(`${agentMain} is not built; run npx tsc -b first`);
  mesh = await startTestMesh({ nodes: [] });
  rotator = await startRotator({
    store: mesh.store,
    masterKey: mesh.masterKey,
    log: createLogger("rotator", { destination: mesh.logs, level: "debug" }),
    sweepMs: 500,
  });
  dir = mkdtempSync(join(tmpdir(), "mesh-hooks-"));
  // nobody reads the script, and writes what it saw where anyone may write.
  chmodSync(dir, 0o755);
  out = join(dir, "out");
  mkdirSync(out);
  chmodSync(out, 0o777);
  script = join(dir, "record.sh");
  writeFileSync(script, `#!/bin/sh\nid -u > ${out}/$MESH_MODULE-g$MESH_GENERATION.uid\nenv > ${out}/$MESH_MODULE-g$MESH_GENERATION.env\n`, { mode: 0o755 });
  bindings = join(dir, "bindings");
  await startAgentProcess([`record=${script}`]);
  expect((await mesh.apply([moduleDoc("hooked", "record"), moduleDoc("unhooked", "reload")])).ok).toBe(true);
  await mesh.waitForState("hooked", "Ready");
  await mesh.waitForState("unhooked", "Ready");
}, 60_000);

afterAll(async () => {
  await stopAgentProcess();
  await rotator?.stop();
  await mesh?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe("onRotate names a hook the node's agent allows", () => {
  it("runs an allowed hook at a rotation as nobody, with none of the agent's environment", async () => {
    await rotate("hooked/key");
    await waitFor("hooked/key#2 committed", async () => (await rotationOf("hooked"))?.state === RotationStates.Committed, 30_000);

    const nobody = lookUpUser("nobody")!;
    const asRoot = process.getuid?.() === 0;
    expect(readFileSync(join(out, "hooked-g2.uid"), "utf8").trim()).toBe(String(asRoot ? nobody.uid : process.getuid?.()));
    const env = envOf(join(out, "hooked-g2.env"));
    expect(Object.keys(env).filter((k) => /^(MESH_NATS_|MESH_MASTER_KEY|NATS_)/.test(k))).toEqual([]);
    for (const v of Object.values(secretEnv)) expect(Object.values(env)).not.toContain(v);
    expect(env).toMatchObject({
      PATH: HOOK_PATH,
      HOME: "/",
      MESH_GRANT: "hooked/key",
      MESH_GENERATION: "2",
      MESH_MODULE: "hooked",
      MESH_PART: "api",
      MESH_REQUIREMENT: "key",
      MESH_BINDING_PATH: join(bindings, "hooked/api/key"),
      SERVICE_BINDING_ROOT: join(bindings, "hooked/api"),
    });
    // Nothing but its own variables (and what sh itself sets).
    expect(
      Object.keys(env)
        .filter((k) => !["PWD", "SHLVL", "_", "OLDPWD"].includes(k))
        .sort(),
    ).toEqual(["HOME", "MESH_BINDING_PATH", "MESH_GENERATION", "MESH_GRANT", "MESH_MODULE", "MESH_PART", "MESH_REQUIREMENT", "PATH", "SERVICE_BINDING_ROOT"]);
  });

  it("runs nothing for a hook the node does not allow: the rotation waits, saying which hook, which node and how to allow it; allowed, it commits by itself", async () => {
    await rotate("unhooked/key");
    const waits = await waitFor(
      "unhooked/key to say its hook is not allowed",
      async () => {
        const c = getCondition((await mesh.grant("unhooked", "key"))?.conditions ?? [], "Rotating");
        return c?.reason === "HookNotAllowed" ? c : undefined;
      },
      20_000,
    );
    expect(waits.status).toBe("True");
    expect(waits.message).toContain(
      `rotation unhooked/key#2 waits for ${NODE}/api: the part's onRotate names hook "reload", which the agent of node ${NODE} does not allow (it allows record), so nothing ran`,
    );
    expect(waits.message).toContain("start that agent with --allow-hook reload=COMMAND");
    // Nothing ran, and nothing was confirmed: generation 1 is still the grant's.
    expect(readdirSync(out).filter((f) => f.startsWith("unhooked"))).toEqual([]);
    const waiting = await rotationOf("unhooked");
    expect(waiting?.state).toBe(RotationStates.AwaitingHolders);
    expect(waiting?.holders[`${NODE}/api`]?.c).toBeUndefined();
    // The agent did not apply, so it has not acknowledged: its consumer holds the broadcast unacknowledged.
    const [own] = await readHolderAcks(mesh.store.jsm, waiting!);
    expect(own).toMatchObject({ holder: `${NODE}/api`, acked: false });
    expect(own!.ackFloor).toBeLessThan(own!.seq);
    expect((await mesh.grant("unhooked", "key"))?.generation).toBe(1);
    // Generation 1 keeps working: the module is not degraded by a rotation that waits.
    expect((await mesh.moduleStatus("unhooked"))?.state).toBe("Ready");
    expect(agentLog).toContain('names hook \\"reload\\", which the agent of node node-a does not allow');

    // meshctl status shows it, beside the rotation that waits.
    const status = spawnSync(process.execPath, [join(repo, "packages/cli/bin/meshctl.js"), "status", "unhooked"], {
      env: { PATH: process.env.PATH, NO_COLOR: "1", NATS_URL: mesh.nats.url },
      cwd: dir,
      encoding: "utf8",
      timeout: 30_000,
    });
    const shown = status.stdout.replace(/\s+/g, " ");
    expect(shown).toContain("rotating 1→2: confirmed 0/1 holder");
    expect(shown).toContain("Rotating True HookNotAllowed");
    expect(shown).toContain('names hook "reload", which the agent of node node-a does not allow');
    expect(shown).toContain("--allow-hook reload=COMMAND");

    // The agent started again allowing it: the broadcast comes back on its consumer, the hook runs, it acks, the rotation commits.
    await stopAgentProcess();
    await startAgentProcess([`record=${script}`, `reload=${script}`]);
    await waitFor("unhooked/key#2 committed", async () => (await rotationOf("unhooked"))?.state === RotationStates.Committed, 45_000);
    expect(existsSync(join(out, "unhooked-g2.uid"))).toBe(true);
    const g = await mesh.grant("unhooked", "key");
    expect(g?.generation).toBe(2);
    expect(getCondition(g!.conditions, "Rotating")).toBeUndefined();
    expect(getCondition(g!.conditions, "Delivered")).toMatchObject({ status: "True", reason: "Delivered" });
  }, 90_000);
});
