import { describe, expect, it } from "vitest";
import { parseManifestText } from "@mesh/shared";
import { controlPlaneYaml, partOfService } from "./bootstrap.js";

describe("meshctl control-plane", () => {
  const base = {
    url: "nats://10.0.0.5:4222",
    nodes: ["node-b"],
    usersFile: "/etc/mesh/nats/users/mesh-users.conf",
    pidFile: "/var/lib/mesh/nats/nats-server.pid",
    adminUser: "mesh-admin",
    adminPasswordFile: "/etc/mesh/nats-admin-password",
  };

  it("prints the documents bootstrap applies, as a manifest meshctl apply accepts", () => {
    const parsed = parseManifestText(controlPlaneYaml({ ...base, servicesNode: "node-a" }));
    expect(parsed.ok).toBe(true);
    if (!parsed.ok) return;
    const [provider, module] = parsed.documents;
    expect(provider).toMatchObject({ kind: "Provider", name: "mesh-nats", node: "node-a", endpoint: "nats://10.0.0.5:4222", options: { usersFile: base.usersFile } });
    // The services' node gets an agent too: it writes their identities.
    expect(module?.kind === "Module" && module.parts.filter((p) => p.name.startsWith("agent-")).map((p) => p.node)).toEqual(["node-a", "node-b"]);
  });

  it("refuses a relative path and a node that cannot host the control plane, as usage errors", () => {
    expect(() => controlPlaneYaml({ ...base, pidFile: "nats.pid" })).toThrow(/--pid-file "nats.pid" is not an absolute path/);
    expect(() => controlPlaneYaml({ ...base, nodes: ["n".repeat(35)] })).toThrow(/cannot host the control plane/);
  });

  it("names the part of each service bootstrap restarts", () => {
    expect(partOfService("resolver")).toBe("resolver");
    expect(partOfService("agent node-b")).toBe("agent-node-b");
  });
});
