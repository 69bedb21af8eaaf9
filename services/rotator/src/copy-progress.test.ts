import { describe, expect, it } from "vitest";
import { Rotation, RotationStates } from "@mesh/shared";
import { everyAtMost, withCarrying } from "./copy-progress.js";

/** A handover's record as a rotator before `carrying` existed wrote it, staging. */
const older = {
  id: "mesh/images#2",
  grant: "mesh/images",
  module: "mesh",
  requirement: "images",
  kind: "oci.registry",
  provider: "registry-oci",
  from: 1,
  to: 2,
  state: "Staged",
  requestedAt: "2025-06-01T12:00:00.000Z",
  deadline: "2025-06-01T12:05:00.000Z",
  holders: { "node-a/agent": {} },
  trigger: "handover",
  fromProvider: "mesh-nats",
};

const progress = { total: 3, copied: 1, present: 0, bytes: 12_345 };

describe("a handover's copy progress in its rotation record", () => {
  it("is written the first time, then at most once a second", () => {
    const due = everyAtMost(1_000);
    expect([0, 10, 999, 1_000, 1_500, 1_999, 2_000, 5_000].map(due)).toEqual([true, false, false, true, false, false, true, true]);
  });

  it("goes into a record written before it existed, and round-trips through the schema", () => {
    const r = Rotation.parse(older);
    expect(r.carrying).toBeUndefined();
    const next = withCarrying(r, r, { ...progress, artifact: "blob agent@sha256:ab" }, "2025-06-01T12:00:01.000Z")!;
    expect(Rotation.parse(JSON.parse(JSON.stringify(next))).carrying).toEqual({
      ...progress,
      artifact: "blob agent@sha256:ab",
      at: "2025-06-01T12:00:01.000Z",
    });
    // Between artifacts there is none under way.
    expect(withCarrying(r, r, progress, "2025-06-01T12:00:02.000Z")!.carrying).not.toHaveProperty("artifact");
  });

  it("is not written over a record that moved on: another rotation, or past staging", () => {
    const r = Rotation.parse(older);
    expect(withCarrying(undefined, r, progress, "t")).toBeUndefined();
    expect(withCarrying({ ...r, id: "mesh/images#3" }, r, progress, "t")).toBeUndefined();
    expect(withCarrying({ ...r, state: RotationStates.Broadcast }, r, progress, "t")).toBeUndefined();
  });
});
