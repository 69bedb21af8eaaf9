import { describe, expect, it } from "vitest";
import { parseManifestText } from "@mesh/shared/manifest-text";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { parseMasterKey } from "@mesh/shared";
import { operatorFiles } from "@mesh/providers";
import { controlPlaneYaml, natsConfigText, partOfService } from "./bootstrap.js";

describe("meshctl control-plane", () => {
  const base = {
    url: "nats://10.0.0.5:4222",
    nodes: ["node-b"],
    adminCredsFile: "/etc/mesh/nats-operator/admin.creds",
    signingKeysFile: "/etc/mesh/nats-operator/signing-keys.json",
  };

  it("prints the documents bootstrap applies, as a manifest meshctl apply accepts", () => {
    const parsed = parseManifestText(controlPlaneYaml({ ...base, servicesNode: "node-a" }));
    expect(parsed.ok).toBe(true);
    if (!parsed.ok) return;
    const [provider, module] = parsed.documents;
    expect(provider).toMatchObject({
      kind: "Provider",
      name: "mesh-nats",
      node: "node-a",
      endpoint: "nats://10.0.0.5:4222",
      admin: { passwordFile: base.adminCredsFile },
      options: { signingKeysFile: base.signingKeysFile },
    });
    // The services' node gets an agent too: it writes their identities.
    expect(module?.kind === "Module" && module.parts.filter((p) => p.name.startsWith("agent-")).map((p) => p.node)).toEqual(["node-a", "node-b"]);
  });

  it("refuses a relative path and a node that cannot host the control plane, as usage errors", () => {
    expect(() => controlPlaneYaml({ ...base, signingKeysFile: "keys.json" })).toThrow(/--signing-keys-file "keys.json" is not an absolute path/);
    expect(() => controlPlaneYaml({ ...base, adminCredsFile: "admin.creds" })).toThrow(/--admin-creds "admin.creds" is not an absolute path/);
    expect(() => controlPlaneYaml({ ...base, nodes: ["n".repeat(35)] })).toThrow(/cannot host the control plane/);
  });

  it("names the part of each service bootstrap restarts", () => {
    expect(partOfService("resolver")).toBe("resolver");
    expect(partOfService("agent node-b")).toBe("agent-node-b");
  });
});

describe("meshctl nats-config", () => {
  it("makes the operator's keys once and prints the same operator every time after; refuses a bad --listen or path", async () => {
    const dir = mkdtempSync(join(tmpdir(), "mesh-nats-config-"));
    try {
      const files = operatorFiles(join(dir, "op"));
      const masterKey = parseMasterKey(randomBytes(32).toString("hex"));
      const first = await natsConfigText({ files, masterKey, listen: "0.0.0.0:4222", storeDir: "/var/lib/nats/js" });
      expect(first).toMatch(/^listen: "0\.0\.0\.0:4222"$/m);
      expect(first).toMatch(/^operator: "ey/m);
      expect(first).toMatch(/^resolver: \{ type: full/m);
      expect(first).toContain('store_dir: "/var/lib/nats/js"');
      expect(first).not.toMatch(/S[OAU][A-Z2-7]{56}/);
      const again = await natsConfigText({ files, masterKey, listen: "0.0.0.0:4222", storeDir: "/var/lib/nats/js" });
      expect(again).toBe(first);
      expect(readFileSync(files.adminCredsFile, "utf8")).toMatch(/BEGIN NATS USER JWT/);
      await expect(natsConfigText({ files, masterKey, listen: "4222" })).rejects.toThrow(/--listen "4222" is not HOST:PORT/);
      await expect(natsConfigText({ files, masterKey, listen: "h:4222", storeDir: "js" })).rejects.toThrow(/--store-dir "js" is not an absolute path/);
      // Another master key cannot open the keys made under the first.
      await expect(natsConfigText({ files, masterKey: parseMasterKey(randomBytes(32).toString("hex")), listen: "h:1" })).rejects.toThrow();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
