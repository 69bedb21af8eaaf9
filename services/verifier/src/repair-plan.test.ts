import { describe, expect, it } from "vitest";
import type { RepairEvent } from "@mesh/shared";
import { appendRepair, describeRepair, repairAction } from "./repair-plan.js";

describe("repairAction", () => {
  it.each([
    { reason: "ResourceMissing", policy: "auto", action: "recreate" },
    { reason: "CredentialRejected", policy: "auto", action: "reapply" },
    { reason: "CredentialDiverged", policy: "auto", action: "reapply" },
    { reason: "ProviderUnreachable", policy: "auto", action: undefined },
    { reason: "ResourceMissing", policy: "report", action: undefined },
    { reason: "CredentialDiverged", policy: "report", action: undefined },
    { reason: "CredentialDiverged", policy: "report", requested: true, action: "reapply" },
    { reason: "ProviderUnreachable", policy: "report", requested: true, action: undefined },
    { reason: "CredentialRejected", policy: "auto", rotating: true, action: undefined },
    // A secret that is a provider's admin password: only a server on an older generation is repaired.
    { reason: "CredentialDiverged", policy: "auto", kind: "secret", action: "reapply" },
    { reason: "CredentialRejected", policy: "auto", kind: "secret", action: undefined },
    { reason: "CredentialDiverged", policy: "report", kind: "secret", action: undefined },
    { reason: "CredentialDiverged", policy: "report", requested: true, kind: "secret", action: "reapply" },
  ] as const)("$reason under $policy (requested $requested, rotating $rotating, kind $kind) → $action", (c) => {
    expect(
      repairAction(c.reason, {
        policy: c.policy,
        requested: "requested" in c ? c.requested : false,
        rotating: "rotating" in c ? c.rotating : false,
        ...("kind" in c ? { kind: c.kind } : {}),
      }),
    ).toBe(c.action);
  });
});

describe("repair history", () => {
  const ev = (i: number): RepairEvent => ({
    at: new Date(i * 1000).toISOString(),
    by: "verifier@h/1",
    action: "reapply",
    reason: "CredentialRejected",
    generation: 1,
    outcome: "repaired",
    message: `repair ${i}`,
    requested: false,
  });
  it("keeps the newest, oldest first", () => {
    let h: RepairEvent[] | undefined;
    for (let i = 1; i <= 25; i++) h = appendRepair(h, ev(i));
    expect(h).toHaveLength(20);
    expect(h![0]!.message).toBe("repair 6");
    expect(h![19]!.message).toBe("repair 25");
  });
  it("says what was found and done", () => {
    expect(describeRepair("recreate", "ResourceMissing", 2, "its role is missing")).toBe(
      "ResourceMissing: its role is missing — re-created the resource with generation 2's credential",
    );
  });
});
