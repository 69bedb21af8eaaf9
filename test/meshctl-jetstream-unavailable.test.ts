/**
 * meshctl meets a NATS whose JetStream is not there for it, three ways, each on servers this
 * file starts: a server without JetStream (said at once, with -js), an account without it (ridden
 * out for the command's deadline, as a reload says the same for a moment, then told how to enable
 * it or which identity to use), and a cluster that lost its majority (ridden out, then told it
 * has no leader, not that it lacks -js). Each says once on stderr what it waits for.
 */
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { runMeshctl } from "./harness/bootstrapped-mesh.js";
import { startNatsServer, writeServerConfig, type NatsServer } from "./harness/nats-server.js";
import { startPlainCluster } from "./harness/nats-cluster.js";
import { scratchDir } from "./harness/scratch.js";

const started: Array<{ stop(): Promise<void> }> = [];
afterAll(async () => {
  for (const s of started.reverse()) await s.stop();
});

/** `meshctl ARGS` from a directory of its own against `url`, as the identity `env` names (none by default). */
const meshctl = (url: string, args: string[], env: Record<string, string> = {}) =>
  runMeshctl(scratchDir("mesh-meshctl-"), args, {
    ...process.env,
    NO_COLOR: "1",
    NATS_URL: url,
    MESH_NATS_CREDENTIALS: "",
    MESH_NATS_USER: "",
    MESH_NATS_PASSWORD: "",
    ...env,
  });

/** A nats-server of this file's with configuration `text` (its store directory is `storeDir`). */
async function serverWith(text: (storeDir: string) => string): Promise<NatsServer> {
  const dir = scratchDir("mesh-js-unavailable-");
  const configFile = join(dir, "nats.conf");
  const storeDir = join(dir, "store");
  writeServerConfig(configFile, text(storeDir));
  const server = await startNatsServer({ configFile, storeDir });
  started.push(server);
  return server;
}

/** The lines of `stderr` that say meshctl is trying again. */
const retryLines = (stderr: string) => stderr.split("\n").filter((l) => l.includes("trying again"));

describe("meshctl where JetStream is not there", () => {
  it("on a server without JetStream: says so at once, with how to start one that has it", async () => {
    const server = await serverWith(() => "# no jetstream block: JetStream is off\n");
    const r = await meshctl(server.url, ["status", "--timeout", "20s"]);
    expect(r.code, r.stderr).toBe(1);
    expect(r.stderr).toContain(`the NATS server at ${server.url} runs without JetStream`);
    expect(r.stderr).toContain("restart the server with -js");
    expect(r.stderr).not.toContain("leader");
    // Nothing to wait for: the server said so of itself.
    expect(retryLines(r.stderr)).toEqual([]);
  });

  it("for an account without JetStream: rides it out as a reload, then says how to enable it or which identity to use", async () => {
    const server = await serverWith(
      (storeDir) =>
        `jetstream { store_dir: "${storeDir}" }\n` +
        "accounts {\n" +
        "  MESH: { jetstream: enabled, users: [{ user: mesh, password: mesh-pass }] }\n" +
        "  OTHER: { users: [{ user: other, password: other-pass }] }\n" +
        "}\n",
    );
    const r = await meshctl(server.url, ["status", "--timeout", "2s"], { MESH_NATS_USER: "other", MESH_NATS_PASSWORD: "other-pass" });
    expect(r.code, r.stderr).toBe(1);
    expect(r.stderr).toContain(`the NATS server at ${server.url} runs JetStream, but not for the account meshctl connected to`);
    expect(r.stderr).toContain("--creds FILE");
    expect(r.stderr).toContain("jetstream: enabled");
    expect(r.stderr).not.toContain("restart the server");
    expect(retryLines(r.stderr)).toHaveLength(1);
    expect(r.stderr).toMatch(/\(tried \d+ times over [\d.]+ s; --timeout gives it longer\)/);
    // The account that has it opens the store.
    const ok = await meshctl(server.url, ["status"], { MESH_NATS_USER: "mesh", MESH_NATS_PASSWORD: "mesh-pass" });
    expect(ok.code, ok.stderr).toBe(0);
  });

  it("on a cluster that lost its majority: waits for an election, then says the cluster has no leader, not that it lacks -js", async () => {
    const cluster = await startPlainCluster({ size: 3 });
    started.push(cluster);
    // The store exists, as on a mesh that ran: what follows is a cluster losing servers, not a new one.
    const before = await meshctl(cluster.url, ["status"]);
    expect(before.code, before.stderr).toBe(0);
    const [left, ...others] = cluster.members;
    for (const m of others) await m.stop({ keepStore: true });
    const r = await meshctl(left!.url, ["status", "--timeout", "4s"]);
    expect(r.code, r.stderr).toBe(1);
    expect(r.stderr).toContain(`the NATS cluster at ${left!.url} has no JetStream leader to answer now`);
    expect(r.stderr).toContain("a majority of the cluster's servers run");
    expect(r.stderr).not.toContain("restart the server");
    // Said once, whichever step met it first (the store's opening, or status's reads: a member that led may answer for a moment).
    expect(retryLines(r.stderr)).toHaveLength(1);
    // Its majority back, the same command answers, within its deadline.
    for (const m of others) await m.restart();
    const after = await meshctl(left!.url, ["status", "--timeout", "60s"]);
    expect(after.code, after.stderr).toBe(0);
  });
});
