import { describe, expect, it } from "vitest";
import { ModuleDoc, parseDuration } from "@mesh/shared";
import { isDue, isExpiring } from "./schedule.js";

const NOW = new Date("2025-06-01T12:00:00.000Z");
const daysAgo = (d: number) => new Date(NOW.getTime() - d * 86_400_000);

describe("isDue for a requirement with rotate: { every: 30d }", () => {
  const doc = ModuleDoc.parse({
    kind: "Module",
    name: "shop",
    parts: [{ name: "api", node: "node-a" }],
    requires: [{ name: "key", kind: "secret", parts: ["api"], rotate: { every: "30d" } }],
  });
  const every = parseDuration(doc.requires[0]!.rotate!.every);

  it.each([
    { name: "a generation 31 days old is due", since: daysAgo(31), due: true },
    { name: "exactly 30 days old is due", since: daysAgo(30), due: true },
    { name: "29 days old is not due", since: daysAgo(29), due: false },
    { name: "made just now is not due", since: NOW, due: false },
    { name: "an unknown age is never due", since: undefined, due: false },
  ])("$name", ({ since, due }) => {
    expect(isDue(since, every, NOW)).toBe(due);
  });

  it("reads the schedule as 30 days", () => {
    expect(every).toBe(30 * 86_400_000);
  });
});

describe("isExpiring for a credential that expires by itself (a NATS user JWT)", () => {
  const expires = new Date(NOW.getTime() + 30 * 86_400_000);
  it.each([
    { name: "in use 61 of its 90 days is due", since: daysAgo(61), due: true },
    { name: "at exactly two thirds is due", since: daysAgo(60), due: true },
    { name: "in use 59 of its 90 days is not due", since: daysAgo(59), due: false },
    { name: "an unknown start counts from the expiry: due only once expired", since: undefined, due: false },
  ])("$name", ({ since, due }) => {
    expect(isExpiring(since, expires, NOW)).toBe(due);
  });

  it("an expired credential, or one whose start is after its expiry, is due", () => {
    expect(isExpiring(daysAgo(10), daysAgo(1), NOW)).toBe(true);
    expect(isExpiring(undefined, NOW, NOW)).toBe(true);
    expect(isExpiring(new Date(expires.getTime() + 1), expires, NOW)).toBe(false);
  });
});
