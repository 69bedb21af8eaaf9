import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { isValidName, NAME_MAX_LENGTH } from "./names.js";
import { ModuleDoc } from "./schemas/manifest.js";
import { deriveModuleState } from "./module-state.js";
import { bindingNameOf, partIdentityRequirement, partIdentityRequirements, requirementOfBinding } from "./part-identity.js";
import { IDENTITY_BINDING, isReservedRequirementName } from "./names.js";

import { meshName as name } from "../../../test/harness/arbitraries.js";

describe("a part's identity requirement", () => {
  it("is identity-<part>, or a shortened name with a hash for a long part; always a valid, reserved name, one per part", () => {
    expect(partIdentityRequirement("app")).toBe("identity-app");
    fc.assert(
      fc.property(name, name, (a, b) => {
        const r = partIdentityRequirement(a);
        expect(isValidName(r)).toBe(true);
        expect(r.length).toBeLessThanOrEqual(NAME_MAX_LENGTH);
        expect(isReservedRequirementName(r)).toBe(true);
        if (a !== b) expect(partIdentityRequirement(b)).not.toBe(r);
      }),
    );
    // A 31-character part still fits; a 32-character one, and one that ends in a hyphen where it is cut, do not.
    expect(partIdentityRequirement("a".repeat(31))).toBe(`identity-${"a".repeat(31)}`);
    expect(partIdentityRequirement("a".repeat(32))).toMatch(/^identity-a{22}-[0-9a-f]{8}$/);
    expect(isValidName(partIdentityRequirement(`${"a".repeat(21)}-${"b".repeat(18)}`))).toBe(true);
  });

  it("has its binding in the directory identity, and back, for any part; other requirements keep their names", () => {
    fc.assert(
      fc.property(name, name, (part, req) => {
        const r = partIdentityRequirement(part);
        expect(bindingNameOf(part, r)).toBe(IDENTITY_BINDING);
        expect(requirementOfBinding(part, IDENTITY_BINDING)).toBe(r);
        if (!isReservedRequirementName(req)) {
          expect(bindingNameOf(part, req)).toBe(req);
          expect(requirementOfBinding(part, req)).toBe(req);
        }
      }),
    );
  });

  it("is one per part of a module, naming the part and its node, and none for the control plane's own module", () => {
    const m = ModuleDoc.parse({
      kind: "Module",
      name: "shop",
      parts: [
        { name: "api", node: "n1" },
        { name: "web", node: "n2", installed: false },
      ],
    });
    expect(partIdentityRequirements(m)).toEqual([
      { name: "identity-api", kind: "mesh.identity", parts: ["api"], options: { part: "api", node: "n1" } },
      { name: "identity-web", kind: "mesh.identity", parts: ["web"], options: { part: "web", node: "n2" } },
    ]);
    expect(partIdentityRequirements(ModuleDoc.parse({ kind: "Module", name: "mesh", parts: [{ name: "resolver", node: "n1" }] }))).toEqual([]);
  });

  it("cannot be declared: the names identity and identity-…, and the kind mesh.identity, are refused in a module", () => {
    const doc = (req: object) => ModuleDoc.safeParse({ kind: "Module", name: "shop", parts: [{ name: "api", node: "n1" }], requires: [req] });
    for (const n of ["identity", "identity-api", "identity-x"]) {
      const r = doc({ name: n, kind: "secret" });
      expect(r.success).toBe(false);
      expect(r.error?.issues[0]?.message).toMatch(/is reserved: the mesh gives every part its identity itself/);
    }
    const k = doc({ name: "bus", kind: "mesh.identity" });
    expect(k.success).toBe(false);
    expect(k.error?.issues[0]?.message).toMatch(/mesh\.identity is not declared.*declare a nats\.user/);
    expect(doc({ name: "identities", kind: "secret" }).success).toBe(true);
  });
});

describe("the state of a module that declares nothing, once its parts have identities", () => {
  const grant = (ready: boolean) =>
    ({
      id: "shop/identity-api",
      module: "shop",
      requirement: "identity-api",
      kind: "mesh.identity",
      parts: ["api"],
      targets: [{ part: "api", node: "n1" }],
      provider: "mesh-nats",
      generation: 1,
      conditions: [
        { type: "Resolved", status: "True", reason: "ProviderSelected", message: "", observedAt: "2026-01-01T00:00:00Z" },
        { type: "Provisioned", status: ready ? "True" : "Unknown", reason: "x", message: "", observedAt: "2026-01-01T00:00:00Z" },
        { type: "Delivered", status: ready ? "True" : "Unknown", reason: "x", message: "", observedAt: "2026-01-01T00:00:00Z" },
      ],
    }) as never;
  it("is NothingRequired once they are delivered, Pending before", () => {
    expect(deriveModuleState(1, [grant(true)], 1)).toMatchObject({ state: "NothingRequired", message: expect.stringMatching(/identities are delivered/) });
    expect(deriveModuleState(1, [grant(false)], 1).state).toBe("Pending");
    expect(deriveModuleState(0, [], 0).state).toBe("NothingRequired");
  });
});
