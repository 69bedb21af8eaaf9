import { describe, expect, it } from "vitest";
import type { Condition, Grant } from "@mesh/shared";
import { grantFixture } from "../../../test/fixtures.js";
import { handoverFrom } from "./handover.js";

const provisioned: Condition = { type: "Provisioned", status: "True", reason: "Provisioned", message: "", observedAt: "2026-11-30T00:00:00Z" };

describe("handoverFrom", () => {
  it.each<{ name: string; over: Partial<Grant>; want: string | undefined }>([
    { name: "a grant on its provider needs none", over: { resource: { provider: "pg-main" }, conditions: [provisioned] }, want: undefined },
    {
      name: "a provisioned grant that moved is handed over from the old provider",
      over: { provider: "pg-new", resource: { provider: "pg-main" }, conditions: [provisioned] },
      want: "pg-main",
    },
    {
      name: "one never provisioned is made anew (by the provisioner)",
      over: { provider: "pg-new", resource: { provider: "pg-main" }, conditions: [] },
      want: undefined,
    },
    { name: "one with no provider now waits", over: { provider: null, resource: { provider: "pg-main" }, conditions: [provisioned] }, want: undefined },
    { name: "generation 0 has nothing to hand over", over: { generation: 0, provider: "pg-new", resource: {}, conditions: [] }, want: undefined },
  ])("$name", ({ over, want }) => {
    expect(handoverFrom(grantFixture(over))).toBe(want);
  });
});
