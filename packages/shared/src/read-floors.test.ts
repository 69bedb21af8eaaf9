import { describe, expect, it } from "vitest";
import { metRevision, noteRevision, revisionFloor } from "./read-floors.js";

describe("read floors", () => {
  it("keeps the newest revision heard of per key, and drops it once a read met it", () => {
    expect(revisionFloor("KV_a", "k")).toBe(0);
    noteRevision("KV_a", "k", 7);
    noteRevision("KV_a", "k", 5); // an older event redelivered: the floor stays
    expect(revisionFloor("KV_a", "k")).toBe(7);
    expect(revisionFloor("KV_b", "k")).toBe(0);
    metRevision("KV_a", "k", 6); // a stale read does not clear it
    expect(revisionFloor("KV_a", "k")).toBe(7);
    metRevision("KV_a", "k", 9);
    expect(revisionFloor("KV_a", "k")).toBe(0);
  });
});
