/**
 * `examples/providers/oci-registry.yaml` as shipped: it applies on a machine where no registry
 * runs (`installed: false`, so the requirement shows ProviderNotInstalled); pointed at the
 * test's own registry and issuer and marked installed, the requirement becomes Ready and the
 * credential the agent delivers pushes and pulls an image in the module's namespace.
 */
import { readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse } from "yaml";
import { ProviderDoc } from "@mesh/shared";
import { startTestMesh, type TestMesh } from "./mesh.js";
import { startOwnOciRegistry, type OwnOciRegistry } from "./harness/oci-registry.js";
import { OciHolder } from "./harness/oci-client.js";
import { waitFor } from "./harness/wait.js";

const repo = fileURLToPath(new URL("..", import.meta.url));
const example = ProviderDoc.parse(parse(readFileSync(join(repo, "examples/providers/oci-registry.yaml"), "utf8")));
const moduleOf = (name: string) => ({
  kind: "Module",
  name,
  parts: [{ name: "app", node: "node-a" }],
  requires: [{ name: "images", kind: "oci.registry", parts: ["app"] }],
});

let mesh: TestMesh;
let registry: OwnOciRegistry;
beforeAll(async () => {
  [mesh, registry] = await Promise.all([startTestMesh(), startOwnOciRegistry()]);
}, 60_000);
afterAll(async () => {
  await mesh?.stop();
  await registry?.stop();
});

describe("the OCI registry example provider", () => {
  it("applies as shipped where no registry runs, and the requirement says ProviderNotInstalled", async () => {
    expect(example.installed).toBe(false);
    expect((await mesh.apply([example, moduleOf("ex-oci-off")])).ok).toBe(true);
    const c = await waitFor("the grant's Resolved condition", async () => {
      const cond = (await mesh.grant("ex-oci-off", "images"))?.conditions.find((x) => x.type === "Resolved");
      return cond?.reason === "ProviderNotInstalled" ? cond : undefined;
    });
    expect(c.message).toContain("oci-main");
  });

  it("once installed, delivers a credential that pushes and pulls in the module's namespace", async () => {
    const passwordFile = join(registry.dir, "admin-password");
    writeFileSync(passwordFile, `${registry.admin.password}\n`, { mode: 0o600 });
    const provider = {
      ...example,
      endpoint: registry.registryUrl,
      options: { issuerUrl: registry.issuerUrl },
      admin: { ...example.admin!, passwordFile },
      installed: true,
    };
    expect((await mesh.apply([provider, moduleOf("ex-oci")])).ok).toBe(true);
    await mesh.waitForState("ex-oci", "Ready", 30_000);
    const dir = join(mesh.bindingsRoot, "node-a/ex-oci/app/images");
    const bindings = Object.fromEntries(readdirSync(dir).map((k) => [k, readFileSync(join(dir, k), "utf8")]));
    expect(bindings).toMatchObject({ type: "oci", provider: "oci-main", namespace: "ex-oci", username: "ex-oci.images", url: registry.registryUrl });
    const layer = Buffer.from("a layer delivered by the mesh");
    await new OciHolder(bindings).pushImage({ repository: "ex-oci/app", tag: "v1" }, layer);
    expect((await new OciHolder(bindings).pullImage({ repository: "ex-oci/app", tag: "v1" })).layer.equals(layer)).toBe(true);
  });
});
