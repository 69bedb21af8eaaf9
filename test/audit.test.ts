/**
 * Named operators and the audit trail, on a mesh whose operator is the mesh (`meshctl
 * bootstrap`): `meshctl admin add alice` issues alice an identity of her own; as alice,
 * `meshctl rotate` and `revoke` are recorded with her name and their outcome, and a part's
 * fetch with the part's; nothing in the trail is a value; no identity may send in another's
 * name, and no service's identity, nor the admin's, may delete or purge a record. Removing alice
 * revokes her identity at once.
 */
import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, credsAuthenticator, type NatsConnection } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { Buckets, CONTROL_PLANE_SERVICES, Streams, identityRequirement } from "@mesh/shared";
import { Kvm } from "@nats-io/kv";
import { natsIdentity, natsTls } from "@mesh/shared/runtime";
import { applySecretModule, meshctlBin, startBootstrappedMesh, type BootstrappedMesh } from "./harness/bootstrapped-mesh.js";
import { spawn } from "node:child_process";
import { serverErrors } from "./harness/refusals.js";
import { waitFor } from "./harness/wait.js";

interface Line {
  id: string;
  who: string;
  action: string;
  grant?: string;
  outcome: string;
  target?: Record<string, unknown>;
}

describe("named operators and the audit trail", () => {
  let mesh: BootstrappedMesh;
  let scratch: string;
  let aliceDir: string;
  const asAlice = () => ({ MESH_NATS_CREDENTIALS: aliceDir });
  // As meshctl connects with an operator's directory: its identity, and the bundle (ca.crt) it verifies the server against.
  const connectWith = (dir: string) =>
    connect({ servers: mesh.url, ...natsIdentity({ MESH_NATS_CREDENTIALS: dir }), ...natsTls({ MESH_NATS_CREDENTIALS: dir }), reconnect: false });
  const connectAdmin = () =>
    connect({ servers: mesh.url, authenticator: credsAuthenticator(readFileSync(mesh.adminCredsFile)), ...mesh.tls(), reconnect: false });
  const audit = async (args: string[] = [], env = asAlice()): Promise<Line[]> => {
    const r = await mesh.meshctl(["audit", "-o", "json", ...args], env);
    expect(r.code, r.stderr).toBe(0);
    return (JSON.parse(r.stdout) as { requests: Line[] }).requests;
  };
  const valueFile = () => join(mesh.cwd, ".mesh/bindings/node-a/app/api/key/value");

  beforeAll(async () => {
    mesh = await startBootstrappedMesh({ nodes: ["node-a"] });
    scratch = mkdtempSync(join(tmpdir(), "mesh-audit-"));
    aliceDir = join(scratch, "alice");
    const applied = await applySecretModule(mesh, { dir: scratch });
    expect(applied.code, applied.stderr).toBe(0);
    await waitFor("app's secret on node-a's disk", () => existsSync(valueFile()) || undefined, 30_000);
  }, 240_000);
  afterAll(async () => {
    await mesh?.stop();
    if (scratch) rmSync(scratch, { recursive: true, force: true });
  });

  it("issues a named operator, whose rotate and revoke are recorded with her name and outcome, a part's fetch with the part's, and no value", async () => {
    const added = await mesh.meshctl(["admin", "add", "alice", "--out", aliceDir]);
    expect(added.code, added.stderr).toBe(0);
    expect(added.stdout).toContain("operator:alice");
    const listed = await mesh.meshctl(["admin", "list", "--json"]);
    expect((JSON.parse(listed.stdout) as { operators: Array<{ name: string }> }).operators.map((o) => o.name)).toEqual(["alice"]);
    // A second add of the same name is refused, naming what to do.
    const again = await mesh.meshctl(["admin", "add", "alice", "--out", join(scratch, "alice-2")]);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain("admin remove alice");

    const values = [readFileSync(valueFile(), "utf8")];
    const rotated = await mesh.meshctl(["rotate", "app/key", "--wait", "--timeout", "60s"], asAlice());
    expect(rotated.code, rotated.stderr).toBe(0);
    await waitFor("the rotated value on disk", () => (readFileSync(valueFile(), "utf8") !== values[0] ? true : undefined), 30_000);
    values.push(readFileSync(valueFile(), "utf8"));
    const revoked = await mesh.meshctl(["revoke", "app/key", "--reason", "a leak drill"], asAlice());
    expect(revoked.code, revoked.stderr).toBe(0);
    await waitFor("the revoked value replaced on disk", () => (readFileSync(valueFile(), "utf8") !== values[1] ? true : undefined), 30_000);
    values.push(readFileSync(valueFile(), "utf8"));

    const lines = await audit();
    const alices = lines.filter((l) => l.who === "operator:alice");
    expect(alices.map((l) => [l.action, l.grant, l.outcome])).toEqual([
      ["rotate", "app/key", "ok"],
      ["revoke", "app/key", "ok"],
    ]);
    expect(alices[1]!.target).toMatchObject({ reason: "a leak drill" });
    // The part's own fetches of each generation, by the part the subject names (its node's agent fetches for it).
    const fetches = lines.filter((l) => l.action === "fetch" && l.grant === "app/key");
    expect(new Set(fetches.map((l) => l.who))).toEqual(new Set(["part:app/api@node-a"]));
    expect(fetches.map((l) => l.target?.generation)).toEqual(expect.arrayContaining([1, 2, 3]));
    expect(fetches.every((l) => l.outcome === "ok")).toBe(true);
    // The admin's apply, as the break-glass identity.
    expect(lines.some((l) => l.who === "admin (break-glass)" && l.action === "apply" && l.outcome === "ok")).toBe(true);
    // Filtered by who and grant.
    expect((await audit(["--who", "alice"])).map((l) => l.action)).toEqual(["rotate", "revoke"]);
    expect((await audit(["--grant", "app/key", "--who", "part:app/api@node-a"])).every((l) => l.action === "fetch")).toBe(true);
    // The revocation on the grant names alice, from the subject, beside what meshctl called itself.
    const admin = await connectAdmin();
    try {
      const grant = (await (await new Kvm(admin).open(Buckets.grants)).get("app.key"))!.json<{ revocations?: Array<{ by?: string }> }>();
      expect(grant.revocations?.at(-1)?.by).toMatch(/^operator:alice \(.+@.+\)$/);
    } finally {
      await admin.close();
    }

    // No value is in the trail: every record, as stored, read as the admin.
    const reader = await connectAdmin();
    try {
      const jsm = await jetstreamManager(reader);
      const info = await jsm.streams.info(Streams.audit);
      let raw = "";
      for (let seq = info.state.first_seq; seq <= info.state.last_seq; seq++) {
        const m = await jsm.streams.getMessage(Streams.audit, { seq }).catch(() => undefined);
        if (m) raw += `${m.string()}\n`;
      }
      expect(raw).toContain("operator:alice");
      for (const v of values) expect(raw).not.toContain(v.trim());
    } finally {
      await reader.close();
    }
  }, 240_000);

  it("records a console session by who opened it, from its start to its end", async () => {
    const console_ = spawn(process.execPath, [meshctlBin, "console", "--listen", "127.0.0.1:0"], {
      cwd: mesh.cwd,
      env: { ...process.env, ...mesh.adminEnv, ...asAlice() },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    console_.stdout!.on("data", (d: Buffer) => (out += d.toString()));
    console_.stderr!.on("data", (d: Buffer) => (out += d.toString()));
    await waitFor("the console's URL", () => /http:\/\/127\.0\.0\.1:\d+\/\?token=/.test(out) || undefined, 30_000).catch((e: unknown) => {
      throw new Error(`${(e as Error).message}\n--- console printed:\n${out}`);
    });
    const exited = new Promise((r) => console_.once("exit", r));
    console_.kill("SIGINT");
    await exited;
    const sessions = (await audit(["--who", "alice"])).filter((l) => l.action === "console");
    expect(sessions.map((l) => [l.who, l.outcome])).toEqual([["operator:alice", "ok"]]);
  });

  it("lets no identity send in another's name, nor write the store or take a snapshot of it, as alice", async () => {
    const nc = await connectWith(aliceDir);
    const errors = serverErrors(nc);
    try {
      // A snapshot of the credentials (meshctl backup) is the admin's alone.
      const attempts = [
        "mesh.api.rotate",
        "mesh.api.rotate.op.bob",
        "mesh.api.delete",
        "$KV.mesh-grants.app.key",
        "$JS.API.STREAM.PURGE.MESH_AUDIT",
        "$JS.API.STREAM.SNAPSHOT.KV_mesh-credentials",
      ];
      for (const a of attempts) nc.publish(a, "{}");
      await nc.flush();
      await waitFor("the server to refuse each", () => (attempts.every((a) => errors.some((e) => e.includes(a))) ? true : undefined), 5_000).catch(() => {
        throw new Error(`not all refused: ${attempts.filter((a) => !errors.some((e) => e.includes(a))).join(", ")}; errors: ${errors.join("; ")}`);
      });
    } finally {
      await nc.close();
    }
    // meshctl backup as alice: refused by the server, and said so with what to run it as.
    const keyFile = join(mesh.cwd, "alice-backup.key");
    writeFileSync(keyFile, randomBytes(32).toString("hex") + "\n", { mode: 0o600 });
    const backup = await mesh.meshctl(["backup", join(mesh.cwd, "alice.backup"), "--key-file", keyFile], asAlice());
    expect(backup.code).toBe(1);
    expect(backup.stderr).toMatch(
      /the server refused this process's identity publishing to "\$JS\.API\.STREAM\.SNAPSHOT\.KV_mesh-[a-z-]+", which meshctl backup needs: run it as an identity allowed to \(the operator's admin/,
    );
    expect(existsSync(join(mesh.cwd, "alice.backup"))).toBe(false);
  });

  it("lets no service's identity, nor the admin's, delete or purge the trail's records", async () => {
    const count = async (nc: NatsConnection) => (await (await jetstreamManager(nc)).streams.info(Streams.audit)).state.messages;
    const admin = await connectAdmin();
    try {
      const before = await count(admin);
      expect(before).toBeGreaterThan(0);
      for (const service of CONTROL_PLANE_SERVICES) {
        const nc = await connectWith(join(mesh.cwd, ".mesh/bindings/node-a/mesh", service, identityRequirement(service)));
        const errors = serverErrors(nc);
        try {
          const jsm = await jetstreamManager(nc, { timeout: 2_000 });
          const tries = [
            () => jsm.streams.purge(Streams.audit),
            () => jsm.streams.delete(Streams.audit),
            () => jsm.streams.deleteMessage(Streams.audit, 1),
            () => jsm.streams.update(Streams.audit, { deny_purge: false, deny_delete: false }),
          ];
          for (const t of tries) await expect(t(), service).rejects.toThrow();
          await waitFor(`the server to refuse ${service}`, () => (errors.some((e) => e.includes("$JS.API.STREAM.PURGE.MESH_AUDIT")) ? true : undefined), 5_000);
        } finally {
          await nc.close();
        }
      }
      // The admin may use the whole API, and the stream itself refuses: deny_purge, deny_delete.
      const jsm = await jetstreamManager(admin);
      await expect(jsm.streams.purge(Streams.audit)).rejects.toThrow(/purge/i);
      await expect(jsm.streams.deleteMessage(Streams.audit, 1)).rejects.toThrow(/delete/i);
      expect(await count(admin)).toBeGreaterThanOrEqual(before);
    } finally {
      await admin.close();
    }
  });

  it("removing an operator revokes her identity at once", async () => {
    const removed = await mesh.meshctl(["admin", "remove", "alice"]);
    expect(removed.code, removed.stderr).toBe(0);
    await expect(connectWith(aliceDir).then((nc) => nc.close())).rejects.toThrow(/authorization|revoked/i);
    const listed = await mesh.meshctl(["admin", "list", "--json"]);
    expect((JSON.parse(listed.stdout) as { operators: unknown[] }).operators).toEqual([]);
    const missing = await mesh.meshctl(["admin", "remove", "alice"]);
    expect(missing.code).toBe(5);
  });
});
