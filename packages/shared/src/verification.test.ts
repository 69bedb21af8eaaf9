import { describe, expect, it } from "vitest";
import { currentProbes, describeLastCheck, lastCheck, probeStaleAfter } from "./verification.js";
import type { ProbeResult } from "./schemas/verification.js";

const now = Date.parse("2026-01-01T00:01:00.000Z");
const at = (secondsAgo: number) => new Date(now - secondsAgo * 1000).toISOString();
const probe = (secondsAgo: number, generation = 2): ProbeResult => ({ ok: true, message: "m", generation, observedAt: at(secondsAgo), intervalMs: 1_000 });
const g = {
  generation: 2,
  targets: [
    { part: "api", node: "node-a" },
    { part: "worker", node: "node-b" },
  ],
};

describe("verification views", () => {
  it("a probe counts while not stale, of the current generation and a current target", () => {
    expect(probeStaleAfter(1_000)).toBe(5_000);
    const probes = { "node-a/api": probe(1), "node-b/worker": probe(6), "node-c/x": probe(1) };
    expect(currentProbes(g, probes, now).map((p) => p.holder)).toEqual(["node-a/api"]);
    expect(currentProbes(g, { "node-a/api": probe(1, 1) }, now)).toEqual([]);
  });
  it("a probe from before the holder was delivered what it holds does not count (a grant declared again starts at generation 1 anew)", () => {
    const held = { ...g, holders: { "node-a/api": { generation: 2, deliveredAt: at(2) } } };
    expect(currentProbes(held, { "node-a/api": probe(3) }, now)).toEqual([]);
    expect(currentProbes(held, { "node-a/api": probe(1) }, now).map((p) => p.holder)).toEqual(["node-a/api"]);
  });
  it("the last check is the newest of the verifier's and the probes'", () => {
    expect(lastCheck(g, { checkedAt: at(3), probes: { "node-a/api": probe(1) } }, now)).toEqual({ at: at(1), from: "node-a" });
    expect(lastCheck(g, { checkedAt: at(0.5), probes: { "node-a/api": probe(1) } }, now)).toEqual({ at: at(0.5), from: "verifier" });
  });
  it("reads as people say it", () => {
    expect(describeLastCheck(true, { at: at(3), from: "node-a" }, now)).toBe("verified 3 s ago from node-a");
    expect(describeLastCheck(false, { at: at(3), from: "verifier" }, now)).toBe("checked 3 s ago from verifier");
  });
});
