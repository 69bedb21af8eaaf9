/**
 * The certificate of the NATS server `meshctl bootstrap` runs is grant `mesh/nats-tls`, held by
 * meshctl as part `nats-server`. Rotated while the services, the agents and a part's SDK
 * connection are connected and another rotation runs: each generation is installed and the
 * server reloaded on SIGHUP with its configuration unchanged, the rotation commits only once a
 * handshake shows it, and the server keeps every connection of the mesh (they log in with the
 * JWT and its signature alone: nats-server 2.9.10 closes, at every reload, a JWT user's
 * connection that also sent its public key); the rotation beside commits (nothing lost, no
 * lock-out). Then `meshctl ca rotate` moves the server, the services and the part onto a new
 * root while the part's connection answers pings: the part's identity is rotated twice, and it
 * moves onto each generation even when a server reload resets its first try.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { X509Certificate } from "node:crypto";
import { existsSync, readFileSync, realpathSync } from "node:fs";
import { join } from "node:path";
import type { NatsConnection } from "@nats-io/transport-node";
import { connectWithIdentity, type IdentityConnection } from "@mesh/client";
import { servedCertificate } from "@mesh/shared/runtime";
import { applySecretModule, startBootstrappedMesh, type BootstrappedMesh } from "./harness/bootstrapped-mesh.js";
import { waitFor } from "./harness/wait.js";

/** Flushes `nc` every 50 ms: how many were answered, and each one's error that was not. */
function pingEvery50ms(nc: NatsConnection): { pings: number; failures: string[]; stop(): void } {
  const p = { pings: 0, failures: [] as string[], stop: () => clearInterval(timer) };
  const timer = setInterval(() => {
    nc.flush().then(
      () => p.pings++,
      (e: unknown) => p.failures.push(String(e)),
    );
  }, 50);
  return p;
}

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
      const pinging = pingEvery50ms(part.nc);

      /** The server's connections of the mesh's services (`mesh-resolver`…), by connection id: a reconnect is a new id. */
      const serviceConnections = async () => {
        const connz = (await (await fetch(`${mesh.monitorUrl}/connz?limit=4096`)).json()) as { connections: Array<{ cid: number; name?: string }> };
        return connz.connections.filter((c) => /^mesh-(resolver|provisioner|verifier|rotator|agent)/.test(c.name ?? "")).map((c) => `${c.name}#${c.cid}`);
      };
      // Every service connected (one may still be moving onto the identity the mesh grants it).
      const services = await waitFor(
        "every service's connection",
        async () => {
          const connected = await serviceConnections();
          return connected.length >= 5 ? connected : undefined;
        },
        30_000,
      );
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
      pinging.stop();
      expect(await serialServed()).not.toBe(first);
      expect(mesh.output()).toMatch(/the NATS server presents generation \d+ of mesh\/nats-tls: certificate \w+, valid until .*; confirmed/);
      expect(mesh.output()).not.toMatch(/could not give the NATS server/);
      expect(readFileSync(join(mesh.cwd, ".mesh/nats-operator/server.conf"), "utf8")).toBe(config);

      // Nothing reconnected: the part's connection saw no disconnect and every ping was answered;
      // every service is on the connection it had.
      expect(pinging.failures).toEqual([]);
      expect(events.filter((e) => e === "disconnect" || e === "reconnect")).toEqual([]);
      expect(pinging.pings).toBeGreaterThan(20);
      const after = await serviceConnections();
      for (const s of services) expect(after).toContain(s);
    },
  );

  it(
    "meshctl ca rotate moves every wire to a new root: the server presents a certificate of it, the bundle and every identity trust it alone, the part's connection answers throughout",
    { timeout: 330_000 },
    async () => {
      const bundleFile = join(mesh.cwd, ".mesh/mesh-ca/ca.crt");
      const rootsOf = (pem: string) => pem.match(/-----BEGIN CERTIFICATE-----[^-]+-----END CERTIFICATE-----/g) ?? [];
      const [oldRoot] = rootsOf(readFileSync(bundleFile, "utf8"));
      const identityDir = join(mesh.cwd, ".mesh/bindings/node-a/app/api/identity");
      part ??= await connectWithIdentity(identityDir);
      const pinging = pingEvery50ms(part.nc);

      const r = await mesh.meshctl(["ca", "rotate", "--timeout", "240s"], undefined, 280_000);
      pinging.stop();
      expect(r.code, `${r.stdout}\n${r.stderr}`).toBe(0);
      expect(r.stdout).toMatch(/no holder trusts another any more/);

      const bundle = readFileSync(bundleFile, "utf8");
      const roots = rootsOf(bundle);
      expect(roots).toHaveLength(1);
      expect(roots[0]).not.toBe(oldRoot);
      const root = new X509Certificate(roots[0]!);
      // The server presents a certificate of the new root, which verifies against the bundle alone.
      const at = new URL(mesh.url);
      const served = (await servedCertificate({ host: at.hostname, port: Number(at.port) }, { ca: bundle })).certificate!;
      expect(served.verify(root.publicKey)).toBe(true);
      // The part's identity and every service's carry that bundle and nothing older.
      expect(readFileSync(join(identityDir, "ca.crt"), "utf8")).toBe(bundle);
      for (const p of ["resolver", "provisioner", "verifier", "rotator", "agent-node-a"])
        expect(readFileSync(join(mesh.cwd, ".mesh/bindings/node-a/mesh", p, `nats-${p}`, "ca.crt"), "utf8"), p).toBe(bundle);
      // The part's connection answered pings throughout: through the server's three new
      // certificates, and its identity's two rotations. Moving onto a new identity is a reconnect
      // (made before the old one breaks): a ping in flight at that moment is refused as
      // "disconnected", the next one answered; nothing else fails, and the connection stays open.
      await part.nc.flush();
      expect(pinging.failures.filter((f) => !/connection disconnected/.test(f))).toEqual([]);
      expect(part.nc.isClosed()).toBe(false);
      expect(pinging.pings).toBeGreaterThan(20);
    },
  );
});
