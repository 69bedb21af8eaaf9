/**
 * The control plane as a consumer of its own mechanism: `meshctl bootstrap` from an empty NATS
 * (started with authentication) to services that connect with the identities the mesh granted
 * them, each limited to what it needs, shown by `meshctl status mesh` like any module.
 */
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect } from "@nats-io/transport-node";
import { CONTROL_PLANE_SERVICES, agentPart, identityRequirement } from "@mesh/shared";
import { startBootstrappedMesh, type BootstrappedMesh } from "./harness/bootstrapped-mesh.js";
import { waitFor } from "./harness/wait.js";

const parts = [...CONTROL_PLANE_SERVICES, agentPart("node-a")];
/** The nats.user of generation 1 of part `part`'s identity (see nats-user-config.ts). */
const userOf = (part: string, generation = 1) => `mesh_${identityRequirement(part)}_${generation % 2 ? "a" : "b"}`;
const bindingOf = (mesh: BootstrappedMesh, part: string) => join(mesh.cwd, ".mesh/bindings/node-a/mesh", part, identityRequirement(part));

describe("meshctl bootstrap", () => {
  let mesh: BootstrappedMesh;
  beforeAll(async () => {
    mesh = await startBootstrappedMesh();
  }, 180_000);
  afterAll(async () => {
    await mesh?.stop();
  });

  it("satisfies the control plane's requirements, then every service connects as the identity the mesh gave it", async () => {
    const serviceOf = (p: string) => (p.startsWith("agent-") ? "mesh-agent" : `mesh-${p}`);
    const conns = await waitFor(
      "every service and the agent on its own identity",
      async () => {
        const c = await mesh.connections();
        return parts.every((p) => c.some((x) => x.name === serviceOf(p) && x.user === userOf(p))) ? c : undefined;
      },
      30_000,
    );
    // Each service has exactly one connection of its own, as its own user; the administrator
    // is left to meshctl and to the provider adapters that administer the mesh's NATS.
    for (const p of parts) expect(conns.filter((x) => x.name === serviceOf(p)).map((x) => x.user)).toEqual([userOf(p)]);
    // (A connection with neither name nor user is an agent checking that the endpoint takes TCP connections.)
    for (const x of conns.filter((c) => c.user === "mesh-admin")) expect(x.name).not.toMatch(/^mesh-(resolver|provisioner|verifier|rotator|agent)$/);
    // Each identity came from the part's own binding, written by the agent.
    for (const p of parts) expect(readFileSync(join(bindingOf(mesh, p), "username"), "utf8").trim()).toBe(userOf(p));
  });

  it("meshctl status mesh shows the control plane's own grants like any module's", async () => {
    const r = await mesh.meshctl(["status", "mesh", "--json"]);
    expect(r.code, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout) as { modules: Array<{ module: string; state: string; grants: Array<{ requirement: string; kind: string; provider: string }> }> };
    const m = report.modules.find((x) => x.module === "mesh")!;
    expect(m.state).toBe("Ready");
    const grants = Object.fromEntries(m.grants.map((g) => [g.requirement, `${g.kind}@${g.provider}`]));
    expect(grants).toMatchObject({
      records: "kv.bucket@mesh-nats",
      artifacts: "object.store@mesh-nats",
      "master-key": "secret@builtin-secret",
      ...Object.fromEntries(parts.map((p) => [identityRequirement(p), "nats.user@mesh-nats"])),
    });
    const text = await mesh.meshctl(["status", "mesh"]);
    expect(text.stdout).toMatch(/mesh\s+Ready/);
    // Without an identity, meshctl says so, and how to get one, rather than "start a nats-server".
    const anonymous = await mesh.meshctl(["status", "mesh"], { MESH_NATS_USER: "", MESH_NATS_PASSWORD_FILE: "" });
    expect(anonymous.code).toBe(1);
    expect(anonymous.stderr).toMatch(/refused this process's identity/);
    expect(anonymous.stderr).toContain("MESH_NATS_USER=mesh-admin");
  });

  it("limits each identity to what its service needs: the resolver may not serve rotations", async () => {
    const dir = bindingOf(mesh, "resolver");
    const nc = await connect({
      servers: mesh.url,
      user: readFileSync(join(dir, "username"), "utf8").trim(),
      pass: readFileSync(join(dir, "password"), "utf8").trim(),
      reconnect: false,
    });
    try {
      const own = nc.subscribe("mesh.api.apply", { queue: "probe" });
      const foreign = nc.subscribe("mesh.api.rotate");
      const outcome = await foreign.closed.then(
        (e) => e,
        (e: unknown) => e,
      );
      expect(String(outcome)).toMatch(/permissions violation/i);
      expect(own.isClosed()).toBe(false);
    } finally {
      await nc.close();
    }
  });

  it("an agent's identity may not write the providers catalog: it could point a provider's admin password anywhere", async () => {
    const dir = bindingOf(mesh, agentPart("node-a"));
    const nc = await connect({
      servers: mesh.url,
      user: readFileSync(join(dir, "username"), "utf8").trim(),
      pass: readFileSync(join(dir, "password"), "utf8").trim(),
      reconnect: false,
    });
    const errors: string[] = [];
    void (async () => {
      for await (const st of nc.status()) if (st.type === "error") errors.push(String(st.error));
    })();
    try {
      nc.publish("$KV.mesh-providers.evil", JSON.stringify({ kind: "Provider" }));
      await nc.flush();
      await waitFor("the server to refuse the write", () => errors.some((e) => /permissions violation.*\$KV\.mesh-providers/i.test(e)) || undefined, 5_000);
    } finally {
      await nc.close();
    }
    const r = await mesh.meshctl(["status", "--json"]);
    expect(r.stdout).not.toContain("evil");
  });

  it("keeps no password in the clear on the server's host: the users file has bcrypt hashes only", () => {
    const users = readFileSync(join(mesh.cwd, ".mesh/nats-auth/users.conf"), "utf8");
    for (const p of parts) expect(users).not.toContain(readFileSync(join(bindingOf(mesh, p), "password"), "utf8").trim());
    expect(users).not.toContain(mesh.adminPassword());
    for (const f of readdirSync(join(mesh.cwd, ".mesh/logs"))) {
      const log = readFileSync(join(mesh.cwd, ".mesh/logs", f), "utf8");
      expect(log).not.toContain(mesh.adminPassword());
      for (const p of parts) expect(log).not.toContain(readFileSync(join(bindingOf(mesh, p), "password"), "utf8").trim());
    }
  });
});
