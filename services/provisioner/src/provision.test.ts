import { describe, expect, it } from "vitest";
import type { Condition } from "@mesh/shared";
import { grantFixture } from "../../../test/fixtures.js";
import { targetGeneration } from "./provision.js";

const provisioned: Condition = { type: "Provisioned", status: "True", reason: "Provisioned", message: "", observedAt: "2026-11-30T00:00:00Z" };
const failed: Condition = { ...provisioned, status: "False", reason: "ProvisionFailed" };

describe("targetGeneration", () => {
  it.each([
    { name: "a new grant starts at 1", over: { generation: 0 }, want: 1 },
    { name: "a provisioned grant needs nothing", over: { resource: { provider: "pg-main" }, conditions: [provisioned] }, want: undefined },
    { name: "a failed one is retried at the same generation", over: { resource: { provider: "pg-main" }, conditions: [failed] }, want: 2 },
    {
      name: "a provisioned grant that moved is the rotator's to hand over",
      over: { provider: "pg-new", resource: { provider: "pg-main" }, conditions: [provisioned] },
      want: undefined,
    },
    {
      name: "one that moved and never worked is made anew there",
      over: { provider: "pg-new", resource: { provider: "pg-main" }, conditions: [failed] },
      want: 3,
    },
  ])("$name", ({ over, want }) => {
    expect(targetGeneration(grantFixture(over))).toBe(want);
  });
});
