/**
 * The certificate of the NATS server `meshctl bootstrap` runs is grant `mesh/nats-tls`, held by
 * meshctl as part `nats-server`. Rotated while the services, the agents and a part's SDK
 * connection are connected and another rotation runs: each generation is installed and the
 * server reloaded on SIGHUP with its configuration unchanged, the rotation commits only once a
 * handshake shows it, and the server keeps every connection of the mesh (they log in with the
 * JWT and its signature alone: nats-server 2.9.10 closes, at every reload, a JWT user's
 * connection that also sent its public key); the rotation beside commits (nothing lost, no
 * lock-out).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { X509Certificate } from "node:crypto";
import { existsSync, readFileSync, realpathSync } from "node:fs";
import { join } from "node:path";
import { connectWithIdentity, type IdentityConnection } from "@mesh/client";
import { servedCertificate } from "@mesh/shared/runtime";
import { applySecretModule, startBootstrappedMesh, type BootstrappedMesh } from "./harness/bootstrapped-mesh.js";
import { waitFor } from "./harness/wait.js";

const SERVER_TLS_BINDING = ".mesh/bindings/node-a/mesh/nats-server/nats-tls";

describe("the mesh's own NATS server certificate, rotated with everything connected", () => {
  let mesh: BootstrappedMesh;
  let part: IdentityConnection | undefined;

  beforeAll(async () => {
    mesh = await startBootstrappedMesh();
  }, 240_000);
  afterAll(async () => {
    await part?.close().catch(() => undefined);
    await mesh?.stop();
  });

  it(
    "is grant mesh/nats-tls: each rotation commits once the server presents it, no connection is dropped, a rotation running beside commits, the configuration never changes",
    { timeout: 240_000 },
    async () => {
      const applied = await applySecretModule(mesh);
      expect(applied.code, applied.stderr).toBe(0);

      // A part's own connection through the SDK, checked every 50 ms.
      const identityDir = join(mesh.cwd, ".mesh/bindings/node-a/app/api/identity");
      await waitFor("app/api's identity", () => existsSync(join(identityDir, "creds")) || undefined, 30_000);
      part = await connectWithIdentity(identityDir);
      const events: string[] = [];
      void (async () => {
        for await (const s of part!.nc.status()) events.push(s.type);
      })();
      let pings = 0;
      const failures: string[] = [];
      const pinging = setInterval(() => {
        part!.nc.flush().then(
          () => pings++,
          (e: unknown) => failures.push(String(e)),
        );
      }, 50);

      /** The server's connections of the mesh's services (`mesh-resolver`…), by connection id: a reconnect is a new id. */
      const serviceConnections = async () => {
        const connz = (await (await fetch(`${mesh.monitorUrl}/connz?limit=4096`)).json()) as { connections: Array<{ cid: number; name?: string }> };
        return connz.connections.filter((c) => /^mesh-(resolver|provisioner|verifier|rotator|agent)/.test(c.name ?? "")).map((c) => `${c.name}#${c.cid}`);
      };
      const services = await serviceConnections();
      expect(services.length).toBeGreaterThanOrEqual(5);
      const config = readFileSync(join(mesh.cwd, ".mesh/nats-operator/server.conf"), "utf8");
      const at = new URL(mesh.url);
      const bundle = readFileSync(join(mesh.cwd, ".mesh/mesh-ca/ca.crt"), "utf8");
      const serialServed = async () =>
        (await servedCertificate({ host: at.hostname, port: Number(at.port) }, { ca: bundle })).certificate!.serialNumber.toLowerCase();
      const serialGranted = () => new X509Certificate(readFileSync(join(mesh.cwd, SERVER_TLS_BINDING, "tls.crt"))).serialNumber.toLowerCase();
      // Once the control plane runs, the server presents the grant's generation, not the one it started with.
      await waitFor("the server to present the grant's certificate", async () => (await serialServed()) === serialGranted() || undefined, 30_000);
      const first = await serialServed();

      // A rotation every holder of app/key confirms through its agent, running beside the server's.
      const rotating = mesh.meshctl(["rotate", "app/key", "--wait", "--timeout", "120s"]);
      for (let i = 0; i < 2; i++) {
        const before = await serialServed();
        const r = await mesh.meshctl(["rotate", "mesh/nats-tls", "--wait", "--timeout", "60s"]);
        expect(r.code, `${r.stdout}\n${r.stderr}`).toBe(0);
        // Committed only after its holder saw the server present it: at once, a handshake shows it.
        const now = await serialServed();
        expect(now).not.toBe(before);
        expect(now).toBe(serialGranted());
        expect(now).toBe(realpathSync(join(mesh.cwd, ".mesh/nats-operator/tls/current")).split("/").pop());
      }
      const rotated = await rotating;
      expect(rotated.code, `${rotated.stdout}\n${rotated.stderr}`).toBe(0);
      clearInterval(pinging);
      expect(await serialServed()).not.toBe(first);
      expect(mesh.output()).toMatch(/the NATS server presents generation \d+ of mesh\/nats-tls: certificate \w+, valid until .*; confirmed/);
      expect(mesh.output()).not.toMatch(/could not give the NATS server/);
      expect(readFileSync(join(mesh.cwd, ".mesh/nats-operator/server.conf"), "utf8")).toBe(config);

      // Nothing reconnected: the part's connection saw no disconnect and every ping was answered;
      // every service is on the connection it had.
      expect(failures).toEqual([]);
      expect(events.filter((e) => e === "disconnect" || e === "reconnect")).toEqual([]);
      expect(pings).toBeGreaterThan(20);
      const after = await serviceConnections();
      for (const s of services) expect(after).toContain(s);
    },
  );
});
