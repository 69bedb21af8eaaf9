/**
 * The case that once locked a mesh out of its own broker, as a test: the control plane's own
 * broker identities rotated with fan-out while every service runs and work flows through
 * them, on a bootstrapped mesh (real processes, NATS whose operator is the mesh). No service
 * loses its connection for good, no work is lost, and an old identity is revoked only after
 * its holder confirmed; a holder stopped during the rotation comes back on its old binding,
 * catches up and confirms, and only then does the rotation commit. The server never reloads.
 */
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CONTROL_PLANE_SERVICES, ModuleStatus, Rotation, agentPart, identityRequirement, subjects } from "@mesh/shared";
import { connectNats, natsIdentity, openStore, readJson, type Store } from "@mesh/shared/runtime";
import type { NatsConnection } from "@nats-io/transport-node";
import { logsIn, startBootstrappedMesh, type BootstrappedMesh } from "./harness/bootstrapped-mesh.js";
import { waitFor } from "./harness/wait.js";

/** The name of the user JWT of generation `generation` of part `part`'s identity (see nats-user.ts). */
const userOf = (part: string, generation: number) => `mesh_${identityRequirement(part)}_${generation}`;
const serviceOf = (part: string) => (part.startsWith("agent-") ? "mesh-agent" : `mesh-${part}`);
const agent = agentPart("node-a");

describe("rotating the control plane's own broker identities", () => {
  let mesh: BootstrappedMesh;
  let nc: NatsConnection;
  let store: Store;
  const binding = (part: string, key: string) =>
    readFileSync(join(mesh.cwd, ".mesh/bindings/node-a/mesh", part, identityRequirement(part), key), "utf8").trim();
  /** The server's configuration load time and start: equal while it never reloaded. */
  const loads = async () => {
    const v = (await (await fetch(`${mesh.monitorUrl}/varz`)).json()) as { config_load_time: string; start: string };
    return { loaded: v.config_load_time, start: v.start };
  };

  beforeAll(async () => {
    mesh = await startBootstrappedMesh();
    nc = await connectNats(mesh.url, { ...natsIdentity({ MESH_NATS_CREDENTIALS: mesh.adminCredsFile }), ...mesh.tls(), name: "lockout-test" });
    store = await openStore(nc);
  }, 180_000);
  afterAll(async () => {
    await nc?.close();
    await mesh?.stop();
  });

  it("rotates every service's identity while work flows: none loses its connection for good, no work is lost", async () => {
    const pids = Object.fromEntries(CONTROL_PLANE_SERVICES.map((s) => [s, mesh.servicePid(s)]));
    const old: Partial<Record<string, string>> = Object.fromEntries(CONTROL_PLANE_SERVICES.map((s) => [s, binding(s, "creds")]));
    // The server reloads only to take its own certificate (when the control plane's grant of it arrives: the harness waits for it).
    const before = await loads();
    const reloads = () => (readFileSync(join(mesh.cwd, ".mesh/logs/nats-server.log"), "utf8").match(/Reloaded server configuration/g) ?? []).length;
    const reloadsBefore = reloads();
    for (const s of CONTROL_PLANE_SERVICES) expect(pids[s], s).toBeDefined();

    // Work through every service: each module's secret is resolved, provisioned, delivered by
    // the agent and verified, all on the identities being rotated.
    let applied = 0;
    let stopTraffic = false;
    const retried: string[] = [];
    const traffic = (async () => {
      for (let i = 0; !stopTraffic; i++) {
        const doc = { kind: "Module", name: `work-${i}`, parts: [{ name: "app", node: "node-a" }], requires: [{ name: "token", kind: "secret" }] };
        // As any client of a request/reply service does (meshctl among them): a request that met
        // the moment a service reconnected (no responders), whose reply was lost (a service that
        // reconnects with a new identity cannot answer what it received before), or that was
        // answered with an error the service marks retryable, is sent again (apply is
        // idempotent); any other answer fails the test.
        const reply = await waitFor(
          `apply of work-${i} answered`,
          async () => {
            const m = await nc
              .request(subjects.apply, JSON.stringify({ documents: [doc], source: "lockout test" }), { timeout: 10_000 })
              .catch((e: unknown) => {
                if (!/no responders|timeout/i.test(String(e))) throw e;
                retried.push(String(e));
                return undefined;
              });
            const body = m?.json() as { ok: boolean; error?: { retryable?: boolean } } | undefined;
            if (body && !body.ok && body.error?.retryable) {
              retried.push(JSON.stringify(body.error));
              return undefined;
            }
            return body;
          },
          30_000,
        );
        expect(reply, `apply of work-${i}: ${JSON.stringify(reply)}`).toMatchObject({ ok: true });
        applied++;
        await new Promise((r) => setTimeout(r, 150));
      }
    })();

    const results = await Promise.all(
      CONTROL_PLANE_SERVICES.map((s) => mesh.meshctl(["rotate", `mesh/${identityRequirement(s)}`, "--wait", "--timeout", "60s", "--json"])),
    );
    stopTraffic = true;
    await traffic;
    for (const [i, r] of results.entries()) {
      expect(r.code, `${CONTROL_PLANE_SERVICES[i]}: ${r.stderr}`).toBe(0);
      const rotation = JSON.parse(r.stdout) as {
        state: string;
        from: number;
        to: number;
        committedAt: string;
        holders: Array<{ holder: string; confirmedAt: string | null }>;
      };
      expect(rotation).toMatchObject({ state: "Committed", from: 1, to: 2 });
      expect(rotation.holders.map((h) => h.holder)).toEqual([`node-a/${CONTROL_PLANE_SERVICES[i]}`]);
      // The old identity went at the commit, which came after its holder confirmed.
      expect(Date.parse(rotation.holders[0]!.confirmedAt!)).toBeLessThanOrEqual(Date.parse(rotation.committedAt));
    }

    // Every service is back on generation 2, on the same process: it reconnected, nothing restarted it.
    await waitFor(
      "every service connected as its generation-2 user",
      async () => {
        const c = await mesh.connections();
        return CONTROL_PLANE_SERVICES.every((s) => c.some((x) => x.name === serviceOf(s) && x.tag === userOf(s, 2))) || undefined;
      },
      30_000,
    );
    for (const s of CONTROL_PLANE_SERVICES) expect(mesh.servicePid(s), `${s} was restarted`).toBe(pids[s]);
    expect(mesh.output()).not.toMatch(/(exited with code|was killed by)/);
    const connected = await mesh.connections();
    for (const s of CONTROL_PLANE_SERVICES) expect(connected.map((x) => x.tag)).not.toContain(userOf(s, 1));
    // Connected as the key in its binding; a service caught reconnecting (seen once in CI, on a
    // loaded machine, with the verifier) is looked at again: it must not lose it for good.
    for (const s of CONTROL_PLANE_SERVICES) {
      await waitFor(
        `${s} connected as the key in its binding`,
        async () => ((await mesh.connections()).find((x) => x.name === serviceOf(s))?.user === binding(s, "nkey") ? true : undefined),
        10_000,
      );
    }

    // The old identities are revoked, the new ones (in the bindings) work.
    for (const s of CONTROL_PLANE_SERVICES) {
      expect(binding(s, "username")).toBe(userOf(s, 2));
      expect(await logsIn(mesh, binding(s, "creds"))).toBe(true);
      expect(old[s] && (await logsIn(mesh, old[s]!)), `${s}'s generation 1`).toBe(false);
    }
    // How we know nothing reloaded: the server's configuration was loaded last before the rotations,
    // and its log has no reload since.
    expect(await loads()).toEqual(before);
    expect(reloads()).toBe(reloadsBefore);

    // No seed of any generation reached a log, though every service watched its binding change.
    for (const f of readdirSync(join(mesh.cwd, ".mesh/logs"))) {
      expect(readFileSync(join(mesh.cwd, ".mesh/logs", f), "utf8"), f).not.toMatch(/S[UOA][A-Z2-7]{56}/);
    }

    // No work was lost: every module applied during the rotations became Ready.
    expect(applied, `retryable answers met on the way: ${retried.join("; ") || "none"}`).toBeGreaterThan(3);
    await waitFor(
      `all ${applied} modules applied during the rotations Ready`,
      async () => {
        for (let i = 0; i < applied; i++) {
          if ((await readJson(store.kv.modules, `work-${i}`, ModuleStatus))?.value.state !== "Ready") return undefined;
        }
        return true;
      },
      60_000,
    );
  }, 240_000);

  it("a holder stopped during the rotation comes back on its old binding, catches up, confirms, and only then is the old identity removed", async () => {
    const pid = mesh.servicePid("agent")!;
    const oldUser = binding(agent, "username");
    const oldCreds = binding(agent, "creds");
    expect(oldUser).toBe(userOf(agent, 1));

    process.kill(pid, "SIGSTOP");
    let stopped = true;
    try {
      const r = await mesh.meshctl(["rotate", `mesh/${identityRequirement(agent)}`, "--wait", "--timeout", "3s", "--json"]);
      expect(r.code, r.stderr).toBe(8); // stalled
      expect(JSON.parse(r.stdout)).toMatchObject({ state: "Stalled", missing: [`node-a/${agent}`] });
      // Stalled: the old identity still works, and the binding on disk is still the old one.
      expect(await logsIn(mesh, oldCreds)).toBe(true);
      expect(binding(agent, "username")).toBe(oldUser);

      // The agent dies while stopped; meshctl starts it again, with the binding it left.
      process.kill(pid, "SIGKILL");
      stopped = false;
    } finally {
      if (stopped) process.kill(pid, "SIGCONT");
    }

    const key = `mesh.${identityRequirement(agent)}`;
    const committed = await waitFor(
      "the rotation to commit once the agent is back",
      async () => {
        const r = (await readJson(store.kv.rotations, key, Rotation))?.value;
        return r?.state === "Committed" ? r : undefined;
      },
      60_000,
    );
    const states = committed.history.map((h) => h.state);
    expect(states.indexOf("Stalled")).toBeGreaterThan(-1);
    expect(states.indexOf("Stalled")).toBeLessThan(states.indexOf("Committed"));
    expect(committed.holders[`node-a/${agent}`]?.c).toBeDefined();
    expect(mesh.servicePid("agent")).not.toBe(pid);

    // The new agent wrote its new binding, and runs on it; the old identity is gone.
    expect(binding(agent, "username")).toBe(userOf(agent, 2));
    await waitFor(
      "the agent connected as its generation-2 user",
      async () => (await mesh.connections()).some((x) => x.name === "mesh-agent" && x.tag === userOf(agent, 2)) || undefined,
      30_000,
    );
    expect(await logsIn(mesh, oldCreds)).toBe(false);
  }, 180_000);
});
