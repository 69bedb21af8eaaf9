/**
 * The attack suite, as node node-a's agent (its delivered identity, on a mesh whose operator is
 * the mesh: `meshctl bootstrap`): write a grant, or another node's records; fetch for a part on
 * node-b; confirm for node-b; write the providers catalog; replace an image or a package in the
 * bootstrap registries every node installs from. Each attack is tried for real and
 * refused by the server, and nothing changed. (Its JetStream API is tried in
 * test/bootstrap.test.ts, beside the check that no service is refused what it needs.)
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, credsAuthenticator } from "@nats-io/transport-node";
import { Kvm } from "@nats-io/kv";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Objm } from "@nats-io/obj";
import { agentPart, holderEndpoint, identityRequirement, subjects } from "@mesh/shared";
import { natsIdentity } from "@mesh/shared/runtime";
import { getImage, putImage, putPackage, sha256Digest } from "@mesh/providers";
import { startBootstrappedMesh, type BootstrappedMesh } from "../harness/bootstrapped-mesh.js";
import { waitFor } from "../harness/wait.js";
import { serverErrors } from "../harness/refusals.js";

const AGENT = agentPart("node-a");

describe("as node node-a's agent", () => {
  let mesh: BootstrappedMesh;
  const connectAs = (part: string) =>
    // As the services and agents connect: the binding's creds, and its inbox prefix.
    connect({
      servers: mesh.url,
      ...natsIdentity({ MESH_NATS_CREDENTIALS: join(mesh.cwd, ".mesh/bindings/node-a/mesh", part, identityRequirement(part)) }),
      ...mesh.tls(),
      reconnect: false,
    });
  const connectAdmin = () =>
    connect({ servers: mesh.url, authenticator: credsAuthenticator(readFileSync(mesh.adminCredsFile)), ...mesh.tls(), reconnect: false });
  beforeAll(async () => {
    mesh = await startBootstrappedMesh();
  }, 180_000);
  afterAll(async () => {
    await mesh?.stop();
  });

  it("may write only its own node's records: no grant, no other node's receipt, node record or probe; its own receipts are what the grants show", async () => {
    const admin = await connectAdmin();
    const kvm = new Kvm(admin);
    const [grants, receipts, nodes, reachability] = await Promise.all(
      ["mesh-grants", "mesh-receipts", "mesh-nodes", "mesh-reachability"].map((b) => kvm.open(b)),
    );
    const before = await grants!.get("mesh.records");
    const nc = await connectAs(AGENT);
    const errors = serverErrors(nc);
    const forged = JSON.stringify({
      ...before!.json<object>(),
      provider: "evil",
      holders: { "node-b/resolver": { generation: 99, deliveredAt: new Date().toISOString() } },
    });
    const attempts = [
      ["$KV.mesh-grants.mesh.records", forged],
      ["$KV.mesh-receipts.node-b.mesh.records.resolver", JSON.stringify({ generation: 99, deliveredAt: new Date().toISOString() })],
      ["$KV.mesh-nodes.node-b", JSON.stringify({ node: "node-b" })],
      ["$KV.mesh-reachability.node-b.mesh-nats", JSON.stringify({ reachable: false })],
    ] as const;
    try {
      for (const [subject, body] of attempts) nc.publish(subject, body);
      await nc.flush();
      await waitFor("the server to refuse every write", () => (attempts.every(([a]) => errors.some((e) => e.includes(a))) ? true : undefined), 5_000).catch(
        () => {
          throw new Error(
            `not all refused: ${attempts
              .filter(([a]) => !errors.some((e) => e.includes(a)))
              .map(([a]) => a)
              .join(", ")}; errors: ${errors.join("; ")}`,
          );
        },
      );
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

  it("may list its own node's receipts (what its bindings root should hold), no other node's, and not under the provisioner's durable", async () => {
    const nc = await connectAs(AGENT);
    const errors = serverErrors(nc);
    try {
      const receipts = await new Kvm(nc).open("mesh-receipts");
      const own: string[] = [];
      for await (const k of await receipts.keys("node-a.>")) own.push(k);
      expect(own).toContain("node-a.mesh.records.resolver");
      // Another node's: the consumer that would list them is refused, so nothing is listed.
      const theirs = await (async () => {
        const found: string[] = [];
        for await (const k of await receipts.keys("node-b.>")) found.push(k);
        return found;
      })().catch((e: unknown) => e);
      expect(theirs).toBeInstanceOf(Error);
      // The provisioner's durable on that stream, which folds every receipt into the grants: not its to take over.
      const stream = "KV_mesh-receipts";
      nc.publish(
        `$JS.API.CONSUMER.CREATE.${stream}.provisioner-receipts.$KV.mesh-receipts.node-a.>`,
        JSON.stringify({ stream_name: stream, config: { durable_name: "provisioner-receipts" } }),
      );
      await nc.flush();
      await waitFor("the server to refuse the durable", () => errors.some((e) => e.includes("provisioner-receipts")), 5_000);
    } finally {
      await nc.close();
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

  it("may read the images and packages it installs from, and may not put any there: it could replace what every node installs", async () => {
    const admin = await connectAdmin();
    const layer = Buffer.from("the operator's layer");
    const manifest = Buffer.from(JSON.stringify({ schemaVersion: 2, layers: [{ digest: sha256Digest(layer), size: layer.length }] }));
    const tarball = Buffer.from("the operator's tarball");
    const nc = await connectAs(AGENT);
    const errors = serverErrors(nc);
    try {
      // The operator fills the stores (the layout's one writer, as the operator's tooling does).
      const byAdmin = new Objm(jetstream(admin));
      await putImage(await byAdmin.open("mesh_images"), { repository: "agent", tag: "1.0", manifest, blobs: [layer] });
      await putPackage(await byAdmin.open("mesh_packages"), { name: "lib", version: "1.0.0", manifest: { name: "@mesh/lib", version: "1.0.0" }, tarball });
      const jsm = await jetstreamManager(admin);
      const counts = async () => Promise.all(["OBJ_mesh_images", "OBJ_mesh_packages"].map(async (s) => (await jsm.streams.info(s)).state.messages));
      const before = await counts();

      // The agent reads both with its own identity.
      const asAgent = new Objm(jetstream(nc));
      const images = await asAgent.open("mesh_images");
      const packages = await asAgent.open("mesh_packages");
      const image = await getImage(images, "agent", "1.0");
      expect(Buffer.from(image!.manifest).equals(manifest)).toBe(true);
      expect(Buffer.from((await image!.blob(sha256Digest(layer)))!).equals(layer)).toBe(true);
      expect(Buffer.from((await packages.getBlob("lib/1.0.0.tgz"))!).equals(tarball)).toBe(true);

      // A put is a publish of chunks and of the object's meta: each is refused by the server.
      const attempts = ["$O.mesh_images.C.forged", "$O.mesh_images.M.forged", "$O.mesh_packages.C.forged", "$O.mesh_packages.M.forged"];
      for (const subject of attempts) nc.publish(subject, "evil");
      await nc.flush();
      await waitFor("the server to refuse every put", () => (attempts.every((a) => errors.some((e) => e.includes(a))) ? true : undefined), 5_000).catch(() => {
        throw new Error(`not all refused: ${attempts.filter((a) => !errors.some((e) => e.includes(a))).join(", ")}; errors: ${errors.join("; ")}`);
      });
      // Nothing was stored, and the image is still the operator's.
      expect(await counts()).toEqual(before);
      expect(Buffer.from((await getImage(images, "agent", "1.0"))!.manifest).equals(manifest)).toBe(true);
    } finally {
      await nc.close();
      await admin.close();
    }
  });
});
