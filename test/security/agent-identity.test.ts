/**
 * The attack suite, as node node-a's agent (its delivered identity, on a mesh whose operator is
 * the mesh: `meshctl bootstrap`): write a grant, or another node's records; fetch for a part on
 * node-b; confirm for node-b; write the providers catalog. Each attack is tried for real and
 * refused by the server, and nothing changed. (Its JetStream API is tried in
 * test/bootstrap.test.ts, beside the check that no service is refused what it needs.)
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, credsAuthenticator } from "@nats-io/transport-node";
import { Kvm } from "@nats-io/kv";
import { agentPart, holderEndpoint, identityRequirement, subjects } from "@mesh/shared";
import { startBootstrappedMesh, type BootstrappedMesh } from "../harness/bootstrapped-mesh.js";
import { waitFor } from "../harness/wait.js";
import { serverErrors } from "../harness/refusals.js";

const AGENT = agentPart("node-a");

describe("as node node-a's agent", () => {
  let mesh: BootstrappedMesh;
  const connectAs = (part: string) =>
    connect({ servers: mesh.url, authenticator: credsAuthenticator(readFileSync(join(mesh.cwd, ".mesh/bindings/node-a/mesh", part, identityRequirement(part), "creds"))), reconnect: false });
  beforeAll(async () => {
    mesh = await startBootstrappedMesh();
  }, 180_000);
  afterAll(async () => {
    await mesh?.stop();
  });

  it("may write only its own node's records: no grant, no other node's receipt, node record or probe; its own receipts are what the grants show", async () => {
    const admin = await connect({ servers: mesh.url, authenticator: credsAuthenticator(readFileSync(mesh.adminCredsFile)), reconnect: false });
    const kvm = new Kvm(admin);
    const [grants, receipts, nodes, reachability] = await Promise.all(["mesh-grants", "mesh-receipts", "mesh-nodes", "mesh-reachability"].map((b) => kvm.open(b)));
    const before = await grants!.get("mesh.records");
    const nc = await connectAs(AGENT);
    const errors = serverErrors(nc);
    const forged = JSON.stringify({ ...before!.json<object>(), provider: "evil", holders: { "node-b/resolver": { generation: 99, deliveredAt: new Date().toISOString() } } });
    const attempts = [
      ["$KV.mesh-grants.mesh.records", forged],
      ["$KV.mesh-receipts.node-b.mesh.records.resolver", JSON.stringify({ generation: 99, deliveredAt: new Date().toISOString() })],
      ["$KV.mesh-nodes.node-b", JSON.stringify({ node: "node-b" })],
      ["$KV.mesh-reachability.node-b.mesh-nats", JSON.stringify({ reachable: false })],
    ] as const;
    try {
      for (const [subject, body] of attempts) nc.publish(subject, body);
      await nc.flush();
      await waitFor("the server to refuse every write", () => (attempts.every(([a]) => errors.some((e) => e.includes(a))) ? true : undefined), 5_000).catch(() => {
        throw new Error(`not all refused: ${attempts.filter(([a]) => !errors.some((e) => e.includes(a))).map(([a]) => a).join(", ")}; errors: ${errors.join("; ")}`);
      });
      // Nothing changed: the grant is at the same revision, and node-b has no records.
      expect((await grants!.get("mesh.records"))!.revision).toBe(before!.revision);
      expect(await receipts!.get("node-b.mesh.records.resolver")).toBeNull();
      expect(await nodes!.get("node-b")).toBeNull();
      expect(await reachability!.get("node-b.mesh-nats")).toBeNull();
      // What the grants say of node-a's holders came from node-a's agent's own receipts.
      const receipt = (await receipts!.get("node-a.mesh.records.resolver"))?.json<{ generation: number }>();
      expect(receipt?.generation).toBeGreaterThanOrEqual(1);
      expect(before!.json<{ holders: Record<string, { generation: number }> }>().holders["node-a/resolver"]?.generation).toBe(receipt?.generation);
    } finally {
      await nc.close();
      await admin.close();
    }
  });

  it("may fetch and confirm (ack on a holder consumer) only for its own node's parts", async () => {
    const nc = await connectAs(AGENT);
    const errors = serverErrors(nc);
    try {
      const body = JSON.stringify({ grant: "mesh/records", part: "resolver", node: "node-b", generation: 1, recipient: "X" });
      await nc.request(subjects.credentialFetch("mesh", "records", "node-b", "resolver"), body, { timeout: 2_000 }).catch(() => undefined);
      // A confirmation is an ack on the holder's own consumer: node-b's agent's stream is not node-a's to ack on, nor to pull from.
      const theirs = holderEndpoint("mesh/records", "node-b/resolver")!;
      nc.publish(`$JS.ACK.${theirs.stream}.${theirs.consumer}.1.1.1.${Date.now()}000000.0`, "+ACK");
      nc.publish(`$JS.API.CONSUMER.MSG.NEXT.${theirs.stream}.${theirs.consumer}`, "{}");
      await nc.flush();
      await waitFor("the server to refuse all three", () => (errors.filter((e) => /permissions violation/i.test(e)).length >= 3 ? true : undefined), 5_000);
      expect(errors.join("\n")).toMatch(/mesh\.api\.credential\.fetch\.mesh\.records\.node-b\.resolver/);
      expect(errors.join("\n")).toContain(`$JS.ACK.${theirs.stream}.${theirs.consumer}`);
      expect(errors.join("\n")).toContain(`$JS.API.CONSUMER.MSG.NEXT.${theirs.stream}`);
    } finally {
      await nc.close();
    }
  });

  it("may not write the providers catalog: it could point a provider's admin password anywhere", async () => {
    const nc = await connectAs(AGENT);
    const errors = serverErrors(nc);
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
});
