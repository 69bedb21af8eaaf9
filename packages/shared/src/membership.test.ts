import { describe, expect, it } from "vitest";
import { liveMembers, memberKey, ownerOf } from "./membership.js";

const keysN = (n: number) => Array.from({ length: n }, (_, i) => `bench-${i}.db`);

describe("ownerOf (rendezvous hashing)", () => {
  it("gives every key to exactly one member, the same one whatever the members' order", () => {
    const members = ["verifier.a", "verifier.b", "verifier.c"];
    for (const k of keysN(200)) {
      const o = ownerOf(k, members);
      expect(members).toContain(o);
      expect(ownerOf(k, [...members].reverse())).toBe(o);
    }
    expect(ownerOf("x.y", [])).toBeUndefined();
  });
  it("splits keys about evenly", () => {
    const members = ["verifier.a", "verifier.b"];
    const mine = keysN(2_000).filter((k) => ownerOf(k, members) === "verifier.a").length;
    expect(mine).toBeGreaterThan(850);
    expect(mine).toBeLessThan(1_150);
  });
  it("moves only the keys of the member that joined or left", () => {
    const two = ["verifier.a", "verifier.b"];
    const three = [...two, "verifier.c"];
    for (const k of keysN(1_000)) {
      const before = ownerOf(k, two)!;
      const after = ownerOf(k, three)!;
      // A key either stays where it was or moves to the newcomer, never between the old two.
      expect(after === before || after === "verifier.c").toBe(true);
    }
  });
});

describe("liveMembers", () => {
  it("keeps members heard from within the stale time, sorted", () => {
    const seen = new Map([
      ["verifier.b", 9_000],
      ["verifier.a", 6_600],
      ["verifier.c", 6_400],
    ]);
    expect(liveMembers(seen, 10_000, 3_500)).toEqual(["verifier.a", "verifier.b"]);
  });
});

describe("memberKey", () => {
  it("is a valid KV key under the service, unique per instance name", () => {
    const a = memberKey("verifier", "verifier@host-1/123");
    const b = memberKey("verifier", "verifier@host_1/123");
    expect(a).toMatch(/^verifier\.[-\w]+$/);
    expect(a).not.toBe(b);
  });
});
