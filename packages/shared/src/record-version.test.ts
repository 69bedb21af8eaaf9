import { describe, expect, it } from "vitest";
import { ErrorCodes } from "./errors.js";
import { RECORD_VERSION, RECORD_VERSION_FIELD, RecordTooNewError, readableRecord, recordJson, recordVersionOf } from "./record-version.js";

describe("record formats", () => {
  it("an object is stored with the format this build writes, and read back without it", () => {
    const stored = JSON.parse(recordJson({ module: "shop", generation: 3 })) as Record<string, unknown>;
    expect(stored[RECORD_VERSION_FIELD]).toBe(RECORD_VERSION);
    expect(readableRecord(stored, "mesh-grants/shop.db")).toEqual({ module: "shop", generation: 3 });
  });

  it("a record read and written again carries this build's format, not the one it was read with", () => {
    expect(JSON.parse(recordJson({ a: 1, [RECORD_VERSION_FIELD]: 0 }))).toEqual({ a: 1, [RECORD_VERSION_FIELD]: RECORD_VERSION });
  });

  it("a record from before formats were recorded, or one that is not an object, is format 1 and read as it is", () => {
    expect(recordVersionOf({ a: 1 })).toBe(1);
    expect(recordVersionOf("text")).toBe(1);
    expect(recordVersionOf([1])).toBe(1);
    expect(recordVersionOf(null)).toBe(1);
    expect(recordVersionOf({ [RECORD_VERSION_FIELD]: "2" })).toBe(1);
    expect(readableRecord({ a: 1 }, "mesh-grants/x")).toEqual({ a: 1 });
    expect(recordJson([1, 2])).toBe("[1,2]");
  });

  it("a record of a newer format is refused, naming it and its format, retryable, never read", () => {
    const raw = { module: "shop", [RECORD_VERSION_FIELD]: RECORD_VERSION + 1 };
    let thrown: unknown;
    try {
      readableRecord(raw, "mesh-grants/shop.db");
    } catch (e) {
      thrown = e;
    }
    expect(thrown).toBeInstanceOf(RecordTooNewError);
    const e = thrown as RecordTooNewError;
    expect(e.code).toBe(ErrorCodes.RecordTooNew);
    expect(e.retryable).toBe(true);
    expect(e.record).toBe("mesh-grants/shop.db");
    expect(e.version).toBe(RECORD_VERSION + 1);
    expect(e.message).toBe(
      `record mesh-grants/shop.db was written by a newer release of the mesh (record format ${RECORD_VERSION + 1}; this program reads formats up to ${RECORD_VERSION}): ` +
        "it was neither read nor changed. Upgrade this program to the release the other services run (docs/upgrades.md); what depends on the record waits until then",
    );
  });
});
