/**
 * A three-server cluster configured by `meshctl nats-config --tls-name … --cluster-file …`:
 * clients and routes speak TLS with certificates of the mesh's authority, each member verifies
 * the others' certificates (a route's authentication), and the mesh runs on it, every identity's
 * binding naming the servers `tls://` with the bundle beside.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readFileSync } from "node:fs";
import { connect as tlsConnect } from "node:tls";
import { join } from "node:path";
import { startOperatorCluster, type OperatorCluster } from "../harness/nats-cluster.js";
import { applySecretModule, startBootstrappedMesh, type BootstrappedMesh } from "../harness/bootstrapped-mesh.js";
import { plainClient } from "../harness/plain-nats-client.js";

interface Varz {
  tls_required?: boolean;
  cluster: { cluster_port: number; tls_required?: boolean; tls_verify?: boolean };
}

const json = async <T>(url: string): Promise<T> => (await (await fetch(url)).json()) as T;

/**
 * A route that offers no certificate: a TLS handshake (a member's route listener starts with
 * it) verified against the bundle, with no client certificate, then a route's CONNECT and PING.
 * Resolves with how the member ended it.
 */
function routeWithoutCertificate(port: number, ca: string): Promise<string> {
  return new Promise((resolve) => {
    const s = tlsConnect({ port, host: "127.0.0.1", ca }, () => {
      // TLS 1.3: the member's refusal of the missing certificate arrives after the client's side is done.
      s.write('CONNECT {"verbose":false,"pedantic":false,"name":"intruder"}\r\nPING\r\n');
    });
    const timer = setTimeout(() => (s.destroy(), resolve("still open after 10 s")), 10_000);
    let said = "";
    s.on("data", (d: Buffer) => (said += d.toString("latin1")));
    s.on("error", (e) => (clearTimeout(timer), resolve(`refused: ${e.message}`)));
    s.on("close", () => (clearTimeout(timer), resolve(said.includes("PONG") ? `answered: ${said}` : "closed")));
  });
}

describe("a three-server cluster with TLS on its clients and routes", () => {
  let cluster: OperatorCluster;
  let mesh: BootstrappedMesh | undefined;

  beforeAll(async () => {
    cluster = await startOperatorCluster({ tls: true });
  }, 120_000);
  afterAll(async () => {
    await mesh?.stop();
    await cluster?.stop();
  });

  it("routes require TLS and verify each member: the members see each other, a route without a certificate of the authority is refused", async () => {
    const ca = readFileSync(cluster.caFile!, "utf8");
    for (const m of cluster.members) {
      const varz = await json<Varz>(`${m.monitorUrl}/varz`);
      expect(varz.tls_required, m.name).toBe(true);
      expect(varz.cluster, m.name).toMatchObject({ tls_required: true, tls_verify: true });
      expect((await json<{ num_routes: number }>(`${m.monitorUrl}/routez`)).num_routes, m.name).toBe(2);
    }
    const first = cluster.members[0]!;
    const port = (await json<Varz>(`${first.monitorUrl}/varz`)).cluster.cluster_port;
    // In the clear a member's route listener says nothing (it begins with the TLS handshake) and closes.
    const plain = await plainClient({ host: "127.0.0.1", port });
    expect(plain.info).toBeUndefined();
    expect(plain.said).not.toMatch(/INFO|PONG/);
    expect(await routeWithoutCertificate(port, ca)).toMatch(/^(refused|closed)/);
    expect((await json<{ num_routes: number }>(`${first.monitorUrl}/routez`)).num_routes).toBe(2);
  });

  it(
    "runs the mesh: bootstrap on its members is Ready, identities name the servers tls:// with the bundle, and a rotation every holder confirms commits",
    { timeout: 300_000 },
    async () => {
      mesh = await startBootstrappedMesh({
        on: { cwd: cluster.cwd, url: cluster.url, monitorUrls: cluster.members.map((m) => m.monitorUrl) },
        env: { MESH_REPLICAS: "" },
      });
      const identity = join(cluster.cwd, ".mesh/bindings/node-a/mesh/resolver/nats-resolver");
      expect(readFileSync(join(identity, "uri"), "utf8")).toBe(cluster.url.replaceAll("nats://", "tls://"));
      expect(readFileSync(join(identity, "ca.crt"), "utf8")).toBe(readFileSync(cluster.caFile!, "utf8"));

      const applied = await applySecretModule(mesh, { timeout: "120s" });
      expect(applied.code, applied.stderr).toBe(0);
      const rotated = await mesh.meshctl(["rotate", "app/key", "--wait", "--timeout", "120s"]);
      expect(rotated.code, `${rotated.stdout}\n${rotated.stderr}`).toBe(0);
    },
  );
});
