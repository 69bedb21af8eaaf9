import { describe, expect, it } from "vitest";
import { grantFixture } from "../../../test/fixtures.js";
import { deletedModuleState, isRevoked, pendingWithdrawals, removalDone, revocationDue, withRemoval } from "./removal.js";

const held = { "node-a/api": { generation: 2, deliveredAt: "t" }, "node-b/worker": { generation: 2, deliveredAt: "t" } };

describe("taking a grant back", () => {
  it("a removed grant has no targets; its holders are to be withdrawn, and its generations revoked", () => {
    const g = withRemoval(grantFixture({ holders: held }), "the module was deleted", new Date("2030-01-01T00:00:00Z"));
    expect(g.targets).toEqual([]);
    expect(g.removal).toEqual({ requestedAt: "2030-01-01T00:00:00.000Z", reason: "the module was deleted" });
    expect(pendingWithdrawals(g)).toEqual(["node-a/api", "node-b/worker"]);
    expect(revocationDue(g)).toBe(true);
    expect(removalDone(g)).toBe(false);
  });

  it("a revocation set out to be done is still due; once done it is not, and a newer generation is due again", () => {
    const g = withRemoval(grantFixture(), "x");
    const intent = { ...g, revoked: { at: "t", generation: 2, dropped: false, done: false } };
    expect(isRevoked(intent)).toBe(false);
    expect(revocationDue(intent)).toBe(true);
    const done = { ...g, revoked: { at: "t", generation: 2, dropped: false, done: true } };
    expect(revocationDue(done)).toBe(false);
    expect(removalDone(done)).toBe(true);
    // A record made before `done` existed counts as done.
    expect(isRevoked({ ...g, revoked: { at: "t", generation: 2, dropped: false } })).toBe(true);
    expect(revocationDue({ ...done, generation: 3 })).toBe(true);
  });

  it("a grant still needed, with every part installed, is not taken back; one whose parts are all uninstalled is", () => {
    expect(revocationDue(grantFixture())).toBe(false);
    expect(revocationDue(grantFixture({ targets: [] }))).toBe(true);
    expect(pendingWithdrawals(grantFixture({ holders: held, targets: [{ part: "api", node: "node-a" }] }))).toEqual(["node-b/worker"]);
  });

  it("a deleted module is Deleting while something is left, Deleted with only retained data, and has no state with nothing", () => {
    const going = withRemoval(grantFixture({ holders: held }), "the module was deleted");
    expect(deletedModuleState([going])).toMatchObject({ state: "Deleting" });
    expect(deletedModuleState([going])!.message).toContain("removing part worker's binding from node node-b");
    const kept = grantFixture({ targets: [], retained: { since: "2030-01-01T00:00:00.000Z" } });
    expect(deletedModuleState([kept])).toMatchObject({ state: "Deleted" });
    expect(deletedModuleState([kept])!.message).toContain("meshctl delete retained shop/db drops it");
    expect(deletedModuleState([])).toBeUndefined();
  });
});
