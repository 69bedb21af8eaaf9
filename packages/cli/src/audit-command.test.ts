/** `meshctl audit`'s pure parts: a change's two records joined, the filters, and --since. */
import { describe, expect, it } from "vitest";
import type { AuditRecord } from "@mesh/shared";
import { joinRecords, matches, sinceTime } from "./audit-command.js";
import { isCliError } from "./cli-error.js";

const rec = (r: Partial<AuditRecord> & Pick<AuditRecord, "id" | "phase">): AuditRecord => ({
  at: "2026-12-06T00:00:00.000Z",
  who: "operator:alice",
  action: "rotate",
  grant: "shop/db",
  service: "rotator@h/1",
  node: "node-a",
  ...r,
});

describe("joinRecords", () => {
  it("joins a change's request and outcome by id, keeps a read's one record, and says unknown where no outcome came", () => {
    const lines = joinRecords([
      rec({ id: "a", phase: "request" }),
      rec({ id: "b", phase: "outcome", action: "fetch", who: "part:shop/api@node-a", outcome: "ok" }),
      rec({ id: "c", phase: "request", action: "revoke" }),
      rec({ id: "a", phase: "outcome", outcome: "NotFound", message: "NotFound: no grant" }),
    ]);
    expect(lines.map((l) => [l.id, l.action, l.outcome])).toEqual([
      ["a", "rotate", "NotFound"],
      ["b", "fetch", "ok"],
      ["c", "revoke", "unknown"],
    ]);
    expect(lines[0]!.message).toBe("NotFound: no grant");
  });
});

describe("matches", () => {
  const line = joinRecords([rec({ id: "a", phase: "outcome", outcome: "ok" })])[0]!;
  it("filters by grant and by who, an operator by name alone too", () => {
    expect(matches(line, {})).toBe(true);
    expect(matches(line, { who: "alice" })).toBe(true);
    expect(matches(line, { who: "operator:alice" })).toBe(true);
    expect(matches(line, { who: "bob" })).toBe(false);
    expect(matches(line, { grant: "shop/db" })).toBe(true);
    expect(matches(line, { grant: "shop/cache" })).toBe(false);
  });
});

describe("sinceTime", () => {
  it("takes a duration back from now, or a time, and refuses anything else", () => {
    const now = Date.parse("2026-12-06T12:00:00Z");
    expect(sinceTime("1h", now)?.toISOString()).toBe("2026-12-06T11:00:00.000Z");
    expect(sinceTime("2026-12-01T00:00:00Z", now)?.toISOString()).toBe("2026-12-01T00:00:00.000Z");
    expect(sinceTime(undefined, now)).toBeUndefined();
    try {
      sinceTime("yesterday", now);
      throw new Error("not refused");
    } catch (e) {
      expect(isCliError(e) && e.message).toContain("neither a duration");
    }
  });
});
