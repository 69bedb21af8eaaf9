import { describe, expect, it } from "vitest";
import { metRevision, noteRevision, revisionFloor } from "./read-floors.js";

describe("read floors", () => {
  it("keeps the newest revision heard of per key, and drops it once a read met it", () => {
    // Two handles of buckets of one name (two servers, or one made again): floors of their own.
    const a = {};
    const b = {};
    expect(revisionFloor(a, "k")).toBe(0);
    noteRevision(a, "k", 7);
    noteRevision(a, "k", 5); // an older event redelivered: the floor stays
    expect(revisionFloor(a, "k")).toBe(7);
    expect(revisionFloor(b, "k")).toBe(0);
    metRevision(a, "k", 6); // a stale read does not clear it
    expect(revisionFloor(a, "k")).toBe(7);
    metRevision(a, "k", 9);
    expect(revisionFloor(a, "k")).toBe(0);
  });
});
