import { describe, expect, it } from "vitest";
import { CONTROL_PLANE_SERVICES, NATS_SERVER_PART, bootstrapProvider, controlPlaneManifest, servicePermissions } from "./control-plane.js";
import { partHolderPermissions, partIdentityPermissions } from "./part-identity.js";
import { ModuleDoc, ProviderDoc } from "./schemas/manifest.js";

describe("the control plane's own module", () => {
  const manifest = controlPlaneManifest({ servicesNode: "node-a", nodes: ["node-a", "node-b", "node-a"] });

  it("is a valid manifest: a part per service and per agent, each with exactly one broker identity of its own", () => {
    expect(ModuleDoc.safeParse(manifest).success).toBe(true);
    expect(manifest.parts.map((p) => `${p.name}@${p.node}`)).toEqual([
      ...CONTROL_PLANE_SERVICES.map((s) => `${s}@node-a`),
      "agent-node-a@node-a",
      "agent-node-b@node-b",
    ]);
    const identities = manifest.requires.filter((r) => r.kind === "nats.user");
    expect(identities.map((r) => r.parts)).toEqual(manifest.parts.map((p) => [p.name]));
    expect(manifest.requires.filter((r) => r.kind !== "nats.user").map((r) => `${r.name}:${r.kind}`)).toEqual([
      "records:kv.bucket",
      "images:oci.registry",
      "packages:npm.registry",
      "master-key:secret",
    ]);
  });

  it("with the server meshctl runs, declares its certificate, held by part nats-server through an identity without an inbox of its own", () => {
    const withTls = controlPlaneManifest({ servicesNode: "node-a", nodes: ["node-a"], serverTls: { ipAddresses: ["127.0.0.1"], lifetime: "24h" } });
    expect(ModuleDoc.safeParse(withTls).success).toBe(true);
    expect(withTls.parts.find((p) => p.name === NATS_SERVER_PART)).toEqual({ name: NATS_SERVER_PART, node: "node-a", installed: true });
    expect(withTls.requires.find((r) => r.name === "nats-tls")).toEqual({
      name: "nats-tls",
      kind: "tls.certificate",
      parts: [NATS_SERVER_PART],
      options: { dnsNames: ["localhost"], ipAddresses: ["127.0.0.1"], usage: "server", lifetime: "24h" },
    });
    const identity = withTls.requires.find((r) => r.name === "nats-nats-server")!;
    expect(identity.kind).toBe("nats.user");
    // The nats.user grant confines it to the grant's inbox; the part's own inbox is not asked for.
    expect(identity.options!.subscribe).toEqual(partHolderPermissions("mesh", "node-a", NATS_SERVER_PART).subscribe);
    expect(String(identity.options!.subscribe)).not.toMatch(/INBOX/);
    expect(manifest.parts.some((p) => p.name === NATS_SERVER_PART)).toBe(false);
  });

  it("gives each service only the requests it serves and the events it sends", () => {
    expect(servicePermissions("resolver").subscribe).toContain("mesh.api.apply");
    expect(servicePermissions("provisioner").subscribe).not.toContain("mesh.api.apply");
    expect(servicePermissions("rotator").publish).toContain("mesh.rotation.*.>");
    expect(servicePermissions("rotator").subscribe).toContain("$JS.EVENT.METRIC.CONSUMER.ACK.*.*");
    expect(servicePermissions("resolver").publish.some((s) => s.startsWith("mesh.rotation."))).toBe(false);
    const agent = servicePermissions({ agent: "node-b" });
    expect(agent.subscribe).toContain("mesh.probe.request.node-b");
    expect(agent.publish).toContain("mesh.probe.report.node-b.>");
    // Confirms (acks) and pulls only on its own node's holder stream.
    expect(agent.publish).toEqual(
      expect.arrayContaining(["$JS.ACK.MESH_HOLD_N_node-b.>", "$JS.API.CONSUMER.MSG.NEXT.MESH_HOLD_N_node-b.*", "$JS.API.CONSUMER.LIST.MESH_HOLD_N_node-b"]),
    );
    expect(agent.publish.filter((s) => s.startsWith("$JS.ACK.") || s.includes("MSG.NEXT."))).toEqual([
      "$JS.API.CONSUMER.MSG.NEXT.MESH_DELIVERIES.agent-node-b",
      "$JS.ACK.MESH_DELIVERIES.agent-node-b.>",
      "$JS.API.CONSUMER.MSG.NEXT.MESH_HOLD_N_node-b.*",
      "$JS.ACK.MESH_HOLD_N_node-b.>",
    ]);
    expect([...agent.publish, ...agent.subscribe].some((s) => s.includes("node-a"))).toBe(false);
  });

  it("asks for no inbox of anyone's and no publishing into one; the services and agents answer the requests they serve", () => {
    for (const who of [...CONTROL_PLANE_SERVICES, { agent: "node-b" }] as const) {
      const p = servicePermissions(who);
      // The nats.user adapter adds the identity's own inbox prefix (and denies every other one).
      expect(
        p.subscribe.some((x) => x.startsWith("_") || x.startsWith("*") || x.startsWith(">")),
        JSON.stringify(who),
      ).toBe(false);
      expect(
        p.publish.some((x) => x.startsWith("_")),
        JSON.stringify(who),
      ).toBe(false);
      expect(p.allowResponses).toBe(true);
    }
  });

  it("lets an agent write only its own node's records, and no grant: its receipts, node record and reachability", () => {
    const agent = servicePermissions({ agent: "node-b" });
    const kvWrites = agent.publish.filter((s) => s.startsWith("$KV."));
    expect(kvWrites).toEqual(["$KV.mesh-nodes.node-b", "$KV.mesh-reachability.node-b.>", "$KV.mesh-receipts.node-b.>"]);
    // Of those buckets it reads by key only its own node's records.
    expect(agent.publish.filter((s) => /DIRECT\.GET\.KV_mesh-(nodes|reachability|receipts)/.test(s))).toEqual([
      "$JS.API.DIRECT.GET.KV_mesh-nodes.$KV.mesh-nodes.node-b",
      "$JS.API.DIRECT.GET.KV_mesh-reachability.$KV.mesh-reachability.node-b.>",
      "$JS.API.DIRECT.GET.KV_mesh-receipts.$KV.mesh-receipts.node-b.>",
    ]);
    // It lists its own receipts (what its bindings root should hold), no other node's, and may not take over the provisioner's durable there.
    expect(agent.publish.filter((s) => s.startsWith("$JS.API.CONSUMER.") && s.includes("mesh-receipts"))).toEqual([
      "$JS.API.CONSUMER.CREATE.KV_mesh-receipts.*.$KV.mesh-receipts.node-b.>",
      "$JS.API.CONSUMER.INFO.KV_mesh-receipts.*",
    ]);
    expect(agent.denyPublish).toContain("$JS.API.CONSUMER.CREATE.KV_mesh-receipts.provisioner-receipts.>");
    // The provisioner, which folds the receipts into the grants, may consume them under its durable.
    expect(servicePermissions("provisioner").publish).toContain("$JS.API.CONSUMER.MSG.NEXT.KV_mesh-receipts.provisioner-receipts");
  });

  it("gives a part's identity its own module's reads, registrations, fetches, and its own holder stream's consumers, nothing of another part", () => {
    const p = partIdentityPermissions("shop", "node-a", "web");
    expect(p.subscribe).toEqual(["mesh.delivery.node-a.shop.web.*", "mesh.withdrawal.node-a.shop.web.*", "_MESH_INBOX.shop.node-a.web.>"]);
    // No other inbox, even where a wildcard would reach it; no publishing into any; no answering requests.
    expect(p.denySubscribe).toEqual(["_INBOX.>", "_GRANT_INBOX.>"]);
    expect(p.denyPublish).toEqual(["_INBOX.>", "_MESH_INBOX.>", "_GRANT_INBOX.>"]);
    expect(p.allowResponses).toBeUndefined();
    expect(p.publish).toEqual([
      "$JS.API.DIRECT.GET.KV_mesh-grants.$KV.mesh-grants.shop.*",
      "$KV.mesh-holders.shop.*.node-a.web.*",
      "mesh.api.credential.fetch.shop.*.node-a.web",
      "$JS.API.CONSUMER.LIST.MESH_HOLD_P_shop_node-a_web",
      "$JS.API.CONSUMER.INFO.MESH_HOLD_P_shop_node-a_web.*",
      "$JS.API.CONSUMER.MSG.NEXT.MESH_HOLD_P_shop_node-a_web.*",
      "$JS.ACK.MESH_HOLD_P_shop_node-a_web.>",
      "mesh.api.apply.shop.node-a.web",
      "mesh.api.credential.list.shop.node-a.web",
    ]);
    // No JetStream API but the reads by key and its own holder stream's consumers (nothing that makes, changes or deletes one); nothing that publishes a broadcast or applies.
    expect(
      p.publish.filter((s) => s.startsWith("$JS.API.")).every((s) => s.startsWith("$JS.API.DIRECT.GET.") || s.includes(".MESH_HOLD_P_shop_node-a_web")),
    ).toBe(true);
    expect(p.publish.some((s) => s.startsWith("mesh.rotation.") || s === "mesh.api.apply")).toBe(false);
    expect(() => partIdentityPermissions("shop", "node-a", "Web!")).toThrow(/invalid name/);
  });

  it("refuses a node whose identity requirement would not be a valid name", () => {
    expect(() => controlPlaneManifest({ servicesNode: "node-a", nodes: ["a".repeat(35)] })).toThrow(/cannot host the control plane/);
  });

  it("declares the bootstrap provider as a valid Provider document", () => {
    const doc = bootstrapProvider({
      url: "nats://127.0.0.1:4333",
      node: "node-a",
      auth: {
        signingKeysFile: "/var/lib/mesh/nats-operator/signing-keys.json",
        admin: { username: "mesh-admin", passwordFile: "/var/lib/mesh/nats-operator/admin.creds" },
      },
    });
    expect(ProviderDoc.safeParse(doc).success).toBe(true);
    expect(doc.serves).toEqual(["nats.user", "kv.bucket", "object.store", "mesh.identity", "oci.registry", "npm.registry"]);
    // On a server without authentication: the parts' identities only, with nothing to read.
    const open = bootstrapProvider({ url: "nats://127.0.0.1:4222", node: "node-a" });
    expect(ProviderDoc.safeParse(open).success).toBe(true);
    expect(open).toMatchObject({ serves: ["mesh.identity"] });
    expect(open.admin).toBeUndefined();
  });
});
