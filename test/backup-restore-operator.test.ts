/**
 * A mesh whose NATS server's operator is the mesh (`meshctl bootstrap`: JWT identities, TLS of
 * the mesh's own authority), backed up with `meshctl backup`, then gone with its whole
 * directory, and brought back in a new directory, as on a new machine, with nothing but the
 * backup and its key: `meshctl bootstrap --restore FILE --key-file KEY` at the same address.
 * The backup carries the operator's keys, the account as last pushed (its revocations) and the
 * authority, so the identities it issued log in again, one revoked before the backup stays
 * refused, and the holders trust the server's certificate as before.
 */
import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { applySecretModule, logsIn, runMeshctl, startBootstrappedMesh, type BootstrappedMesh } from "./harness/bootstrapped-mesh.js";
import { waitFor } from "./harness/wait.js";
import { startNatsServer } from "./harness/nats-server.js";
import { freePort } from "./harness/ports.js";

const dirs: string[] = [];
const meshes: BootstrappedMesh[] = [];
afterAll(async () => {
  for (const m of meshes) await m.stop().catch(() => undefined);
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
const newDir = (prefix: string) => {
  const d = mkdtempSync(join(tmpdir(), prefix));
  dirs.push(d);
  return d;
};

const IDENTITY = ".mesh/bindings/node-a/app/api/identity/creds";
const SECRET = ".mesh/bindings/node-a/app/api/key/value";

interface StatusReport {
  modules: Array<{
    module: string;
    state: string;
    grants: Array<{ requirement: string; generation: number; conditions: Array<{ type: string; status: string }> }>;
  }>;
}

describe("a mesh whose operator is the mesh, restored on a new machine from its backup", () => {
  it(
    "comes back with the same operator, authority and identities: the holders' identities log in, a revoked one stays refused, every grant verifies",
    { timeout: 600_000 },
    async () => {
      const first = await startBootstrappedMesh();
      meshes.push(first);
      const applied = await applySecretModule(first);
      expect(applied.code, applied.stderr).toBe(0);
      await waitFor("app/api's identity", () => existsSync(join(first.cwd, IDENTITY)) || undefined, 30_000);
      const revokedCreds = readFileSync(join(first.cwd, IDENTITY), "utf8");
      // The part's identity rotated: generation 1 is revoked in the account, which the server holds in its resolver's directory.
      const rotated = await first.meshctl(["rotate", "app/identity-api", "--wait", "--timeout", "120s"]);
      expect(rotated.code, rotated.stderr).toBe(0);
      await waitFor("app/api's identity of generation 2", () => readFileSync(join(first.cwd, IDENTITY), "utf8") !== revokedCreds || undefined, 30_000);
      await waitFor("generation 1 to be refused", async () => !(await logsIn(first, revokedCreds)) || undefined, 30_000);
      const identity = readFileSync(join(first.cwd, IDENTITY), "utf8");
      const secret = readFileSync(join(first.cwd, SECRET), "utf8");
      const bundle = readFileSync(join(first.cwd, ".mesh/mesh-ca/ca.crt"), "utf8");
      const operator = readFileSync(join(first.cwd, ".mesh/nats-operator/operator.json"), "utf8");

      const kept = newDir("mesh-backup-kept-");
      const keyFile = join(kept, "backup.key");
      writeFileSync(keyFile, randomBytes(32).toString("hex") + "\n", { mode: 0o600 });
      const file = join(kept, "mesh.backup");
      const backup = await first.meshctl(["backup", file, "--key-file", keyFile, "--json"]);
      expect(backup.code, backup.stderr).toBe(0);
      const said = JSON.parse(backup.stdout) as { files: string[] };
      expect(said.files).toEqual(
        expect.arrayContaining([
          "nats-operator/operator.json",
          "nats-operator/signing-keys.json",
          "nats-operator/admin.creds",
          "mesh-ca/ca.crt",
          "mesh-ca/ca-key.json",
        ]),
      );
      expect(said.files.some((f) => f.startsWith("nats-operator/resolver/"))).toBe(true);
      // From another directory, as the admin: the files are not there, and meshctl says what that backup lacks.
      const elsewhere = newDir("mesh-backup-elsewhere-");
      const partial = await runMeshctl(elsewhere, ["backup", join(elsewhere, "streams-only.backup"), "--key-file", keyFile], {
        ...process.env,
        ...first.adminEnv,
        MESH_NATS_CA_FILE: join(first.cwd, ".mesh/mesh-ca/ca.crt"),
        MESH_MASTER_KEY_FILE: join(first.cwd, ".mesh/master.key"),
      });
      expect(partial.code, partial.stderr).toBe(0);
      expect(partial.stderr).toMatch(/the server requires an identity, and .*nats-operator holds no operator's files: .* cannot bring its identities back/);

      // The machine is gone: the mesh stopped, its directory (store, keys, bindings) removed.
      await first.stop();
      expect(existsSync(first.cwd)).toBe(false);

      // Without its key, up refuses before it starts anything.
      const machine = newDir("mesh-restored-");
      const noKey = await runMeshctl(machine, ["bootstrap", "--restore", file], { ...process.env, NATS_URL: first.url });
      expect(noKey.code).toBe(2);
      expect(noKey.stderr).toContain("--restore needs --key-file KEY");
      expect(existsSync(join(machine, ".mesh"))).toBe(false);

      const second = await startBootstrappedMesh({ restart: { cwd: machine, url: first.url }, args: ["--restore", file, "--key-file", keyFile] });
      meshes.push(second);
      expect(second.output()).toMatch(/restoring the backup of .*: wrote \.mesh\/master\.key, .*\.mesh\/nats-operator\/signing-keys\.json/);
      expect(second.output()).toMatch(/restored \d+ streams onto /);
      // At the address the mesh had: nothing to say of identities that name another.
      expect(second.output()).not.toContain("every identity already delivered names");
      expect(readFileSync(join(machine, ".mesh/nats-operator/operator.json"), "utf8")).toBe(operator);
      expect(readFileSync(join(machine, ".mesh/mesh-ca/ca.crt"), "utf8")).toBe(bundle);

      // The identity the holder kept from before logs in; the one revoked before the backup does not.
      expect(await logsIn(second, identity)).toBe(true);
      expect(await logsIn(second, revokedCreds)).toBe(false);

      // Every grant of app verified anew, the secret delivered again as it was.
      const status = await waitFor(
        "app Ready, each of its grants Verified",
        async () => {
          const r = await second.meshctl(["status", "app", "--json"]);
          const m = r.code === 0 ? (JSON.parse(r.stdout) as StatusReport).modules.find((x) => x.module === "app") : undefined;
          const verified = m?.grants.every((g) => g.conditions.some((c) => c.type === "Verified" && c.status === "True"));
          return m?.state === "Ready" && m.grants.length === 2 && verified ? m : undefined;
        },
        120_000,
      );
      expect(status.grants.find((g) => g.requirement === "identity-api")?.generation).toBe(2);
      await waitFor("app/api's secret delivered again", () => existsSync(join(machine, SECRET)) || undefined, 60_000);
      expect(readFileSync(join(machine, SECRET), "utf8")).toBe(secret);

      // The keys alone, into a directory that holds them already: nothing written; into one of another mesh: refused.
      const again = await runMeshctl(machine, ["restore", file, "--key-file", keyFile, "--keys-only"], process.env);
      expect(again.code, again.stderr).toBe(0);
      expect(again.stdout).toContain("every file of it was in place already");
      const other = newDir("mesh-other-");
      const otherMesh = await runMeshctl(other, ["restore", file, "--key-file", keyFile, "--keys-only"], { ...process.env, MESH_MASTER_KEY: "" });
      expect(otherMesh.code, otherMesh.stderr).toBe(0);
      writeFileSync(join(other, ".mesh/nats-operator/signing-keys.json"), "{}");
      const refused = await runMeshctl(other, ["restore", file, "--key-file", keyFile, "--keys-only"], process.env);
      expect(refused.code).toBe(1);
      expect(refused.stderr).toMatch(/signing-keys\.json differs from the backup's: this machine holds another mesh's operator/);

      // A server run apart from meshctl: the keys put back alone, its configuration made from them
      // (meshctl nats-config), then the streams restored onto it as its admin.
      const apart = newDir("mesh-restored-apart-");
      const noKeyEnv = { ...process.env, MESH_MASTER_KEY: "", MESH_MASTER_KEY_FILE: "", MESH_NATS_CREDENTIALS: "" };
      const keysOnly = await runMeshctl(apart, ["restore", file, "--key-file", keyFile, "--keys-only"], noKeyEnv);
      expect(keysOnly.code, keysOnly.stderr).toBe(0);
      expect(keysOnly.stdout).toMatch(/put back the keys of the backup of .*: wrote .*\.mesh\/master\.key/);
      const port = await freePort();
      const config = await runMeshctl(apart, ["nats-config", "--listen", `127.0.0.1:${port}`, "--store-dir", join(apart, "store")], noKeyEnv);
      expect(config.code, config.stderr).toBe(0);
      writeFileSync(join(apart, "server.conf"), config.stdout);
      const server = await startNatsServer({ port, configFile: join(apart, "server.conf"), storeDir: join(apart, "store") });
      try {
        const ownAdmin = { ...noKeyEnv, NATS_URL: server.url, MESH_NATS_CREDENTIALS: join(apart, ".mesh/nats-operator/admin.creds") };
        const streams = await runMeshctl(apart, ["restore", file, "--key-file", keyFile, "--json"], ownAdmin);
        expect(streams.code, streams.stderr).toBe(0);
        expect((JSON.parse(streams.stdout) as { streams: unknown[]; files: unknown[] }).files).toEqual([]);
        // The operator and the account as the backup had them: the kept identity in, the revoked one out.
        const at = { url: server.url, tls: () => ({}) };
        expect(await logsIn(at, identity)).toBe(true);
        expect(await logsIn(at, revokedCreds)).toBe(false);
        const status = await runMeshctl(apart, ["get", "grants", "-o", "json"], ownAdmin);
        expect(status.code, status.stderr).toBe(0);
        expect(status.stdout).toContain("identity-api");
      } finally {
        await server.stop();
      }
    },
  );
});
