import { describe, expect, it } from "vitest";
import { deriveModuleState } from "./module-state.js";
import type { Condition } from "./conditions.js";
import type { Grant } from "./schemas/grant.js";

const c = (type: Condition["type"], status: Condition["status"], reason: Condition["reason"]): Condition => ({
  type,
  status,
  reason,
  message: "",
  observedAt: "2026-01-01T00:00:00.000Z",
});

const grant = (requirement: string, conditions: Condition[], targets = 1): Grant => ({
  id: `m/${requirement}`,
  module: "m",
  requirement,
  kind: "secret",
  parts: ["api"],
  targets: targets ? [{ part: "api", node: "node-a" }] : [],
  provider: "p",
  generation: 1,
  resource: {},
  holders: {},
  conditions,
});

const ready = [c("Resolved", "True", "ProviderSelected"), c("Provisioned", "True", "Provisioned"), c("Delivered", "True", "Delivered")];

describe("deriveModuleState", () => {
  it.each([
    { name: "no requirement", n: 0, grants: [], state: "NothingRequired" },
    { name: "not yet resolved", n: 1, grants: [], state: "Pending" },
    { name: "resolved, not provisioned", n: 1, grants: [grant("a", [c("Resolved", "True", "ProviderSelected")])], state: "Pending" },
    { name: "all delivered", n: 1, grants: [grant("a", ready)], state: "Ready" },
    { name: "no provider", n: 2, grants: [grant("a", ready), grant("b", [c("Resolved", "False", "NoProvider")])], state: "Unsatisfiable" },
    { name: "provider not installed", n: 1, grants: [grant("a", [c("Resolved", "False", "ProviderNotInstalled")])], state: "Unsatisfiable" },
    {
      name: "provisioning failed",
      n: 1,
      grants: [grant("a", [c("Resolved", "True", "ProviderSelected"), c("Provisioned", "False", "ProvisionFailed")])],
      state: "Degraded",
    },
    { name: "verification failed", n: 1, grants: [grant("a", [...ready, c("Verified", "False", "CredentialRejected")])], state: "Degraded" },
    {
      name: "dormant grant does not block",
      n: 2,
      grants: [grant("a", ready), grant("b", [c("Resolved", "True", "ProviderSelected"), c("Provisioned", "False", "NoInstalledPart")], 0)],
      state: "Ready",
    },
    { name: "awaiting delivery", n: 1, grants: [grant("a", [ready[0]!, ready[1]!, c("Delivered", "False", "AwaitingDelivery")])], state: "Pending" },
  ])("$name → $state", ({ n, grants, state }) => {
    expect(deriveModuleState(n, grants).state).toBe(state);
  });

  it("names the unsatisfiable requirement and its reason", () => {
    const d = deriveModuleState(1, [grant("db", [c("Resolved", "False", "NoProvider")])]);
    expect(d.message).toBe("db: NoProvider");
  });
});
