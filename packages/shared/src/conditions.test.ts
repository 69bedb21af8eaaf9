import { describe, expect, it } from "vitest";
import { setCondition, getCondition } from "./conditions.js";
import { parseDuration, formatAge } from "./duration.js";

describe("setCondition", () => {
  const t0 = new Date("2026-01-01T00:00:00Z");
  const t1 = new Date("2026-01-01T00:01:00Z");
  it("sets only on change, so observedAt keeps the time of the change", () => {
    const a = setCondition([], { type: "Resolved", status: "True", reason: "ProviderSelected", message: "p" }, t0);
    const b = setCondition(a, { type: "Resolved", status: "True", reason: "ProviderSelected", message: "p" }, t1);
    expect(b).toBe(a);
    const c = setCondition(b, { type: "Resolved", status: "False", reason: "NoProvider", message: "x" }, t1);
    expect(getCondition(c, "Resolved")).toMatchObject({ status: "False", observedAt: t1.toISOString() });
    expect(c).toHaveLength(1);
  });
  it("keeps conditions in a stable order", () => {
    let cs = setCondition([], { type: "Delivered", status: "True", reason: "Delivered", message: "" });
    cs = setCondition(cs, { type: "Resolved", status: "True", reason: "ProviderSelected", message: "" });
    expect(cs.map((c) => c.type)).toEqual(["Resolved", "Delivered"]);
  });
});

describe("durations", () => {
  it.each([
    ["500ms", 500],
    ["2s", 2000],
    ["1.5m", 90000],
    ["30d", 30 * 86400000],
  ])("%s", (t, ms) => expect(parseDuration(t)).toBe(ms));
  it("explains a bad one", () => expect(() => parseDuration("10 minutes")).toThrow(/500ms, 10s/));
  it("formats ages", () => {
    expect(formatAge(3000)).toBe("3 s");
    expect(formatAge(600000)).toBe("10 min");
  });
});
