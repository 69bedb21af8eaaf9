/**
 * A node that lost its disk, agent identity and all (`meshctl reissue-agent`), on a mesh whose
 * operator is the mesh (`meshctl bootstrap`, agents on node-a and node-b): node-b's agent stops
 * answering (SIGSTOP: a machine gone) and its bindings root is deleted; the operator issues its
 * identity again. The old key stops working at once, the new one is written where the operator
 * said, readable by the operator only, and an agent started on it writes its own binding and
 * every other binding of node-b again at the generations the grants have.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, credsAuthenticator } from "@nats-io/transport-node";
import { Kvm } from "@nats-io/kv";
import { Buckets, keys, type Grant } from "@mesh/shared";
import { natsIdentity } from "@mesh/shared/runtime";
import { applySecretModule, startBootstrappedMesh, SECOND_INSTANCE_ENV, type BootstrappedMesh } from "./harness/bootstrapped-mesh.js";
import { endProcess } from "./harness/processes.js";
import { waitFor } from "./harness/wait.js";

const IDENTITY = "mesh/agent-node-b/nats-agent-node-b";

describe("meshctl reissue-agent", () => {
  let mesh: BootstrappedMesh;
  let scratch: string;
  let stoppedAgent: number | undefined;
  let ownAgent: ChildProcess | undefined;
  const bindings = (node: string) => join(mesh.cwd, ".mesh/bindings", node);

  beforeAll(async () => {
    mesh = await startBootstrappedMesh({ nodes: ["node-a", "node-b"] });
    scratch = mkdtempSync(join(tmpdir(), "mesh-reissue-"));
  }, 180_000);
  afterAll(async () => {
    await endProcess(ownAgent, 10_000);
    // A stopped process ignores SIGTERM until continued: ended here, before meshctl stops.
    if (stoppedAgent) process.kill(stoppedAgent, "SIGKILL");
    await mesh?.stop();
    if (scratch) rmSync(scratch, { recursive: true, force: true });
  });

  it("says what is wrong with a node that has no agent identity, and with an --out that holds files", async () => {
    const none = await mesh.meshctl(["reissue-agent", "node-z", "--out", join(scratch, "z")]);
    expect(none.code).toBe(5);
    expect(none.stderr).toContain("node node-z has no agent identity: module mesh has no requirement nats-agent-node-z");
    expect(existsSync(join(scratch, "z"))).toBe(false);
    const full = mkdtempSync(join(scratch, "full-"));
    writeFileSync(join(full, "kept"), "");
    const used = await mesh.meshctl(["reissue-agent", "node-b", "--out", full]);
    expect(used.code).toBe(2);
    expect(used.stderr).toContain("is not empty; give a new directory");
  });

  it("revokes the lost identity at once and writes the new one; an agent started on it writes node-b's bindings again", async () => {
    expect((await applySecretModule(mesh, { node: "node-b", dir: scratch })).code).toBe(0);
    const valueFile = join(bindings("node-b"), "app/api/key/value");
    await waitFor("app's secret on node-b's disk", () => existsSync(valueFile), 30_000);
    const value = readFileSync(valueFile, "utf8");
    const oldCreds = readFileSync(join(bindings("node-b"), IDENTITY, "creds"));
    const inboxPrefix = readFileSync(join(bindings("node-b"), IDENTITY, "inboxPrefix"), "utf8");

    // node-b is gone: its agent answers nothing, and its disk is lost.
    stoppedAgent = mesh.servicePid("agent", { MESH_NODE: "node-b" });
    expect(stoppedAgent).toBeDefined();
    const env = Object.fromEntries(
      readFileSync(`/proc/${stoppedAgent}/environ`, "utf8")
        .split("\0")
        .filter(Boolean)
        .map((kv) => [kv.slice(0, kv.indexOf("=")), kv.slice(kv.indexOf("=") + 1)]),
    );
    const script = readFileSync(`/proc/${stoppedAgent}/cmdline`, "utf8").split("\0")[1]!;
    process.kill(stoppedAgent!, "SIGSTOP");
    rmSync(bindings("node-b"), { recursive: true, force: true });

    const out = join(scratch, "agent-node-b");
    const r = await mesh.meshctl(["reissue-agent", "node-b", "--out", out, "--json", "--reason", "node-b re-imaged"]);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ node: "node-b", grant: "mesh/nats-agent-node-b", revoked: 1, generation: 2, out });
    expect(statSync(out).mode & 0o777).toBe(0o700);
    expect(statSync(join(out, "creds")).mode & 0o777).toBe(0o600);
    expect(readFileSync(join(out, "inboxPrefix"), "utf8")).toBe(inboxPrefix);
    expect(readFileSync(join(out, "creds"), "utf8")).not.toBe(oldCreds.toString());

    // The old key is refused; the new one connects, as an agent does, with its inbox prefix.
    await expect(
      connect({ servers: mesh.url, authenticator: credsAuthenticator(oldCreds), ...mesh.tls(), reconnect: false, maxReconnectAttempts: 0 }),
    ).rejects.toThrow(/Authorization Violation|authentication/i);
    const nc = await connect({ servers: mesh.url, ...natsIdentity({ MESH_NATS_CREDENTIALS: out }), ...mesh.tls(), reconnect: false });
    await nc.flush();
    await nc.close();
    // Recorded on the grant: which generation, by whom, why, and who was locked out.
    const admin = await connect({ servers: mesh.url, authenticator: credsAuthenticator(readFileSync(mesh.adminCredsFile)), ...mesh.tls(), reconnect: false });
    const grant = (await (await new Kvm(admin).open(Buckets.grants)).get(keys.grant("mesh", "nats-agent-node-b")))?.json<Grant>();
    await admin.close();
    expect(grant?.revocations?.at(-1)).toMatchObject({ generation: 1, reason: "node-b re-imaged", lockedOut: ["node-b/agent-node-b"] });

    // The operator copies it to node-b and starts the agent on it once.
    ownAgent = spawn(process.execPath, [script], {
      env: { ...env, MESH_NATS_CREDENTIALS: out, [SECOND_INSTANCE_ENV]: "reissued" },
      stdio: ["ignore", "ignore", "pipe"],
    });
    let stderr = "";
    ownAgent.stderr!.on("data", (d: Buffer) => (stderr = (stderr + d.toString()).slice(-4_000)));
    await waitFor(`node-b's own identity binding written again (agent: ${stderr})`, () => existsSync(join(bindings("node-b"), IDENTITY, "creds")), 60_000);
    expect(readFileSync(join(bindings("node-b"), IDENTITY, "creds"), "utf8")).toBe(readFileSync(join(out, "creds"), "utf8"));
    await waitFor("app's secret written again on node-b", () => existsSync(valueFile), 60_000);
    expect(readFileSync(valueFile, "utf8")).toBe(value);
  }, 240_000);
});
