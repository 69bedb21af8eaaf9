import { describe, expect, it } from "vitest";
import { sourceOfRecordProblem } from "./service-main.js";
import { Buckets, SOURCE_OF_RECORD, Streams } from "./subjects.js";

describe("the source of record as grant mesh/records names it", () => {
  it("is every bucket and stream of subjects.ts, defined nowhere else", () => {
    expect(SOURCE_OF_RECORD.buckets).toEqual(Object.values(Buckets));
    expect(SOURCE_OF_RECORD.streams).toEqual(Object.values(Streams));
  });

  it("accepts a binding that names this version's store, and says what differs otherwise", () => {
    const bound = { buckets: Object.values(Buckets).join(","), streams: Object.values(Streams).join(",") };
    expect(sourceOfRecordProblem(bound)).toBeUndefined();
    expect(sourceOfRecordProblem({ ...bound, buckets: "mesh-grants" })).toMatch(
      /names buckets mesh-grants and streams MESH_DELIVERIES,MESH_AUDIT, but this service keeps its state in buckets mesh-manifests,.*meshctl bootstrap/,
    );
    expect(sourceOfRecordProblem({})).toMatch(/names buckets \(none\)/);
  });
});
