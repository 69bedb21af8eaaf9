/**
 * The certificate of the NATS server `meshctl bootstrap` runs, renewed while the services, the
 * agents and a part's SDK connection are connected and a rotation runs: the server takes each
 * new certificate on SIGHUP with its configuration unchanged and keeps every connection of the
 * mesh (they log in with the JWT and its signature alone: nats-server 2.9.10 closes, at every
 * reload, a JWT user's connection that also sent its public key), the rotation that spans the
 * renewals commits (nothing lost, no lock-out), and every handshake after shows the new serial.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { existsSync, readFileSync, realpathSync } from "node:fs";
import { join } from "node:path";
import { connectWithIdentity, type IdentityConnection } from "@mesh/client";
import { servedCertificate } from "@mesh/shared/runtime";
import { applySecretModule, startBootstrappedMesh, type BootstrappedMesh } from "./harness/bootstrapped-mesh.js";
import { waitFor } from "./harness/wait.js";

/** Short, so that it renews every 20 s (at two thirds) while the test runs, after bootstrap is done. */
const LIFETIME = "30s";

describe("the mesh's own NATS server certificate, renewed with everything connected", () => {
  let mesh: BootstrappedMesh;
  let part: IdentityConnection | undefined;

  beforeAll(async () => {
    mesh = await startBootstrappedMesh({ args: ["--nats-tls-lifetime", LIFETIME] });
  }, 240_000);
  afterAll(async () => {
    await part?.close().catch(() => undefined);
    await mesh?.stop();
  });

  it(
    "renews it in place while a rotation runs: no connection is dropped, the rotation commits, the configuration never changes",
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
      const first = await serialServed();
      const renewals = () => (mesh.output().match(/renewed the NATS server's certificate/g) ?? []).length;
      const before = renewals();

      // A rotation every holder confirms through its agent, running across two renewals.
      const rotating = mesh.meshctl(["rotate", "app/key", "--wait", "--timeout", "120s"]);
      await waitFor("two renewals of the server's certificate", () => renewals() >= before + 2 || undefined, 90_000);
      const rotated = await rotating;
      expect(rotated.code, `${rotated.stdout}\n${rotated.stderr}`).toBe(0);
      clearInterval(pinging);

      const now = await serialServed();
      expect(now).not.toBe(first);
      expect(now).toBe(realpathSync(join(mesh.cwd, ".mesh/nats-operator/tls/current")).split("/").pop());
      expect(mesh.output()).not.toMatch(/could not renew the NATS server's certificate/);
      expect(readFileSync(join(mesh.cwd, ".mesh/nats-operator/server.conf"), "utf8")).toBe(config);

      // Nothing reconnected: the part's connection saw no disconnect and every ping was answered;
      // every service is on the connection it had.
      expect(failures).toEqual([]);
      expect(events.filter((e) => e === "disconnect" || e === "reconnect")).toEqual([]);
      expect(pings).toBeGreaterThan(200);
      const after = await serviceConnections();
      for (const s of services) expect(after).toContain(s);
    },
  );
});
