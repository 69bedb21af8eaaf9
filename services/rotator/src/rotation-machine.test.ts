import { describe, expect, it } from "vitest";
import { RotationStates, getCondition, type Confirmation, type Grant, type HolderRegistration, type Rotation } from "@mesh/shared";
import { grantFixture } from "../../../test/fixtures.js";
import {
  countMissing,
  evictHolders,
  generationsToPurge,
  allConfirmed,
  applyConfirmations,
  enter,
  holdersOf,
  missingHolders,
  nameHolders,
  newRotation,
  nextNoticeInterval,
  nextStep,
  refusal,
  withRotatingCondition,
} from "./rotation-machine.js";

const T0 = new Date("2025-06-01T12:00:00.000Z");
const at = (ms: number) => new Date(T0.getTime() + ms);

function grant(over: Partial<Grant> = {}): Grant {
  return grantFixture({
    id: "shop/key",
    requirement: "key",
    kind: "secret",
    provider: "builtin-secret",
    generation: 1,
    holders: {
      "node-a/api": { generation: 1, deliveredAt: T0.toISOString() },
      "node-b/worker": { generation: 1, deliveredAt: T0.toISOString() },
    },
    ...over,
  });
}

function registration(node: string, part: string, instance: string, seenAgoMs = 0, grantId = "shop/key"): HolderRegistration {
  const seen = new Date(T0.getTime() - seenAgoMs).toISOString();
  return { holder: `${node}/${part}/${instance}`, grant: grantId, node, part, instance, registeredAt: seen, seenAt: seen };
}

/** A rotation of {@link grant} from 1 to 2 with the given holders, deadline 1 s after T0. */
function rotation(holders = ["node-a/api", "node-b/worker"], state: Rotation["state"] = RotationStates.AwaitingHolders): Rotation {
  return { ...newRotation({ grant: grant(), holders, resource: {}, timeoutMs: 1_000, now: T0 }), state };
}

function confirmation(holder: string, over: Partial<Confirmation> = {}): Confirmation {
  return { rotation: "shop/key#2", grant: "shop/key", holder, generation: 2, confirmedAt: at(300).toISOString(), ...over };
}

const targets = new Set(["node-a/api", "node-b/worker"]);

describe("holdersOf", () => {
  it.each([
    { name: "agents holding a generation of a target part", g: grant(), regs: [], want: ["node-a/api", "node-b/worker"] },
    {
      name: "not a part that is no longer a target, nor one never delivered",
      g: grant({ targets: [{ part: "api", node: "node-a" }, { part: "cron", node: "node-c" }], holders: { "node-a/api": { generation: 1, deliveredAt: "" }, "node-b/worker": { generation: 1, deliveredAt: "" }, "node-c/cron": { generation: 0, deliveredAt: "" } } }),
      regs: [],
      want: ["node-a/api"],
    },
    {
      name: "SDK instances of a target part seen recently, not stale ones, nor other grants' or non-targets'",
      g: grant({ holders: {} }),
      regs: [registration("node-a", "api", "i1", 1_000), registration("node-a", "api", "old", 10 * 60_000), registration("node-a", "api", "x", 0, "shop/other"), registration("node-z", "api", "i2")],
      want: ["node-a/api/i1"],
    },
  ])("$name", ({ g, regs, want }) => {
    expect(holdersOf(g, regs, T0)).toEqual(want);
  });
});

describe("newRotation and enter", () => {
  it("starts Staged at k+1 with every holder unconfirmed and the deadline from the timeout", () => {
    const r = newRotation({ grant: grant(), holders: ["node-a/api"], resource: { role: "x" }, timeoutMs: 5_000, now: T0, trigger: "schedule" });
    expect(r).toMatchObject({ id: "shop/key#2", from: 1, to: 2, state: "Staged", deadline: at(5_000).toISOString(), holders: { "node-a/api": {} }, trigger: "schedule" });
    expect(r.history).toEqual([{ state: "Staged", at: T0.toISOString() }]);
  });

  it("appends history on a change, sets committedAt on commit, and is a no-op for the same state", () => {
    const r = rotation(undefined, RotationStates.Staged);
    const b = enter(r, RotationStates.Broadcast, at(10));
    expect(b.history.map((h) => h.state)).toEqual(["Staged", "Broadcast"]);
    expect(enter(b, RotationStates.Broadcast, at(20))).toBe(b);
    const c = enter(b, RotationStates.Committed, at(30));
    expect(c.committedAt).toBe(at(30).toISOString());
    expect(b.committedAt).toBeUndefined();
  });
});

describe("nextStep: the transitions", () => {
  const confirmedAll = (r: Rotation): Rotation => ({ ...r, holders: Object.fromEntries(Object.keys(r.holders).map((h) => [h, { c: 100 }])) });
  const cases: Array<{ name: string; r: Rotation; now: Date; want: ReturnType<typeof nextStep> }> = [
    { name: "Staged → broadcast", r: rotation(undefined, "Staged"), now: at(0), want: { action: "broadcast" } },
    { name: "Broadcast → await", r: rotation(undefined, "Broadcast"), now: at(0), want: { action: "await" } },
    { name: "AwaitingHolders before the deadline, holders missing → wait until the deadline", r: rotation(), now: at(500), want: { action: "wait", untilMs: at(1_000).getTime() } },
    { name: "AwaitingHolders at the deadline, holders missing → stall naming them", r: rotation(), now: at(1_000), want: { action: "stall", missing: ["node-a/api", "node-b/worker"] } },
    { name: "AwaitingHolders, all confirmed → commit", r: confirmedAll(rotation()), now: at(500), want: { action: "commit" } },
    { name: "AwaitingHolders past the deadline but all confirmed → commit, not stall", r: confirmedAll(rotation()), now: at(5_000), want: { action: "commit" } },
    { name: "AwaitingHolders with no holder at all → commit", r: rotation([]), now: at(0), want: { action: "commit" } },
    { name: "Stalled with holders still missing → nothing (k keeps working)", r: rotation(undefined, "Stalled"), now: at(9_000), want: { action: "none" } },
    { name: "Stalled, the missing ones confirmed → commit", r: confirmedAll(rotation(undefined, "Stalled")), now: at(9_000), want: { action: "commit" } },
    { name: "Committed → nothing", r: confirmedAll(rotation(undefined, "Committed")), now: at(0), want: { action: "none" } },
  ];
  it.each(cases)("$name", ({ r, now, want }) => {
    expect(nextStep(r, now)).toEqual(want);
  });

  it("a stalled rotation completes when the missing holder confirms", () => {
    let r = rotation();
    r = applyConfirmations(r, [confirmation("node-a/api")], targets, at(200)).rotation!;
    const step = nextStep(r, at(1_500));
    expect(step).toEqual({ action: "stall", missing: ["node-b/worker"] });
    r = enter(r, RotationStates.Stalled, at(1_500));
    expect(withRotatingCondition([], r, at(1_500))[0]?.message).toContain("node-b/worker");
    expect(nextStep(r, at(2_000))).toEqual({ action: "none" });
    r = applyConfirmations(r, [confirmation("node-b/worker")], targets, at(60_000)).rotation!;
    expect(missingHolders(r)).toEqual([]);
    expect(nextStep(r, at(60_000))).toEqual({ action: "commit" });
  });
});

describe("applyConfirmations", () => {
  it("records an accepted confirmation with the holder's received/applied times and the rotator's confirmed time, as offsets", () => {
    const r = rotation();
    const out = applyConfirmations(r, [confirmation("node-a/api", { receivedAt: at(20).toISOString(), appliedAt: at(80).toISOString() })], targets, at(120));
    expect(out.accepted).toHaveLength(1);
    expect(out.refused).toEqual([]);
    expect(out.rotation!.holders["node-a/api"]).toEqual({ r: 20, a: 80, c: 120 });
    expect(r.holders["node-a/api"]).toEqual({}); // the input is not mutated
    expect(missingHolders(out.rotation!)).toEqual(["node-b/worker"]);
  });

  it.each([
    { name: "a holder that does not hold the grant", c: confirmation("node-x/intruder"), reason: "node-x/intruder does not hold grant shop/key" },
    { name: "an SDK instance of a part that is not a target", c: confirmation("node-x/api/i1"), reason: "does not hold grant shop/key" },
    { name: "a target part that joined after the rotation started", c: confirmation("node-a/api/late"), reason: "was not a holder of grant shop/key when rotation shop/key#2 started" },
    { name: "a holder confirming the wrong generation", c: confirmation("node-a/api", { generation: 3 }), reason: "confirmed generation 3" },
    { name: "a holder confirming another rotation id", c: confirmation("node-a/api", { rotation: "shop/key#7" }), reason: "rotation shop/key#2 moves to generation 2" },
  ])("refuses $name, records the refusal and leaves progress alone", ({ c, reason }) => {
    const r = rotation();
    const out = applyConfirmations(r, [c], targets, at(100));
    expect(out.accepted).toEqual([]);
    expect(out.refused).toHaveLength(1);
    expect(out.refused[0]!.reason).toContain(reason);
    expect(out.rotation!.refused).toEqual([{ holder: c.holder, at: at(100).toISOString(), reason: out.refused[0]!.reason }]);
    expect(missingHolders(out.rotation!)).toEqual(["node-a/api", "node-b/worker"]);
  });

  it("refuses every confirmation when no rotation runs, without a record to change", () => {
    const out = applyConfirmations(undefined, [confirmation("node-a/api"), confirmation("node-x/intruder")], targets, at(0));
    expect(out.rotation).toBeUndefined();
    expect(out.refused.map((x) => x.reason)).toEqual(["no rotation shop/key#2 of grant shop/key is running", "node-x/intruder does not hold grant shop/key"]);
  });

  it("treats duplicate confirmations as one: the first time is kept, a repeat changes nothing", () => {
    const r = rotation();
    const once = applyConfirmations(r, [confirmation("node-a/api"), confirmation("node-a/api")], targets, at(100));
    expect(once.accepted).toHaveLength(1);
    expect(once.rotation!.holders["node-a/api"]).toEqual({ c: 100 });
    const again = applyConfirmations(once.rotation, [confirmation("node-a/api")], targets, at(900));
    expect(again.rotation).toBe(once.rotation);
    expect(again.accepted).toEqual([]);
    expect(again.refused).toEqual([]);
  });

  it("after the commit, takes a recorded confirmation sent again as a repeat and refuses the rest, changing nothing", () => {
    const recorded = applyConfirmations(rotation(), [confirmation("node-a/api"), confirmation("node-b/worker")], targets, at(100)).rotation!;
    const committed = enter(recorded, RotationStates.Committed, at(200));
    const out = applyConfirmations(committed, [confirmation("node-a/api"), confirmation("node-x/intruder"), confirmation("node-a/api", { rotation: "shop/key#3", generation: 3 })], targets, at(300));
    expect(out.rotation).toBe(committed);
    expect(out.refused.map((x) => [x.confirmation.holder, x.reason])).toEqual([
      ["node-x/intruder", "node-x/intruder does not hold grant shop/key"],
      ["node-a/api", "no rotation shop/key#3 of grant shop/key is running"],
    ]);
    // Listed as a holder, never recorded (it cannot be: the commit waited for it), yet said plainly.
    const odd = enter(rotation(), RotationStates.Committed, at(200));
    expect(refusal(odd, confirmation("node-a/api"), targets)).toBe("rotation shop/key#2 of grant shop/key is Committed; it no longer takes confirmations");
  });

  it("takes a holder's repeat of a committed generation as nothing while the next rotation runs, and never counts it for that one", () => {
    // Rotation #3 (2 → 3) runs; node-a's confirmation of #2 comes again, its answer lost.
    const next: Rotation = { ...rotation(), id: "shop/key#3", from: 2, to: 3 };
    const stale = confirmation("node-a/api", { rotation: "shop/key#2", generation: 2 });
    const out = applyConfirmations(next, [stale], targets, at(100));
    expect(out.refused).toEqual([]);
    expect(out.accepted).toEqual([]);
    expect(out.rotation).toBe(next);
    expect(missingHolders(next)).toEqual(["node-a/api", "node-b/worker"]);
    // Without the grant's targets it cannot be told from a forgery: refused, so the rotator reads them.
    expect(refusal(next, stale, new Set())).toBeDefined();
    // Not a holder of the grant: refused as before.
    expect(refusal(next, confirmation("node-x/intruder", { rotation: "shop/key#2", generation: 2 }), targets)).toBe("node-x/intruder does not hold grant shop/key");
  });

  it("keeps only the newest refusals", () => {
    const forged = Array.from({ length: 25 }, (_, i) => confirmation(`node-x/p${i}`));
    const out = applyConfirmations(rotation(), forged, targets, at(0));
    expect(out.rotation!.refused).toHaveLength(20);
    expect(out.rotation!.refused.at(-1)?.holder).toBe("node-x/p24");
  });

  it("refusal() accepts a confirmation of a holder of the running rotation", () => {
    expect(refusal(rotation(), confirmation("node-b/worker"), targets)).toBeUndefined();
  });

  it("refusal() decides on the running rotation's confirmations alike with or without the grant's targets, which only shape the reason", () => {
    const none = new Set<string>();
    for (const c of [confirmation("node-b/worker"), confirmation("node-x/intruder"), confirmation("node-a/api/late"), confirmation("node-a/api", { generation: 3 })]) {
      expect(refusal(rotation(), c, none) === undefined, c.holder).toBe(refusal(rotation(), c, targets) === undefined);
    }
  });
});

describe("nextNoticeInterval", () => {
  it("waits `first` after the first send, then doubles up to the ceiling, never below `first`", () => {
    const seq: number[] = [];
    let every: number | undefined;
    for (let i = 0; i < 7; i++) seq.push((every = nextNoticeInterval(every, 5_000, 60_000)));
    expect(seq).toEqual([5_000, 10_000, 20_000, 40_000, 60_000, 60_000, 60_000]);
    // A first interval above the ceiling stays as it is.
    expect(nextNoticeInterval(nextNoticeInterval(undefined, 90_000, 60_000), 90_000, 60_000)).toBe(90_000);
  });
});

describe("allConfirmed", () => {
  it("is true only when no holder is missing (and for no holders at all)", () => {
    const r = rotation();
    expect(allConfirmed(r)).toBe(false);
    const half = applyConfirmations(r, [confirmation("node-a/api")], targets, at(100)).rotation!;
    expect(allConfirmed(half)).toBe(false);
    expect(allConfirmed(applyConfirmations(half, [confirmation("node-b/worker")], targets, at(200)).rotation!)).toBe(true);
    expect(allConfirmed(rotation([]))).toBe(true);
  });
});

describe("evictHolders", () => {
  it("stops waiting for the holders named, leaves the confirmed alone, and lists the ones it does not have", () => {
    const half = applyConfirmations(rotation(), [confirmation("node-a/api")], targets, at(100)).rotation!;
    const out = evictHolders(half, ["node-b/worker", "node-a/api", "node-z/nope"], at(300));
    expect(out.evicted).toEqual(["node-b/worker"]);
    expect(out.confirmed).toEqual(["node-a/api"]);
    expect(out.unknown).toEqual(["node-z/nope"]);
    expect(out.rotation.holders["node-b/worker"]!.e).toBeGreaterThanOrEqual(0);
    expect(allConfirmed(out.rotation)).toBe(true);
    expect(missingHolders(out.rotation)).toEqual([]);
    expect(countMissing(out.rotation)).toBe(0);
    // Evicting again changes nothing.
    expect(evictHolders(out.rotation, ["node-b/worker"], at(400)).rotation).toBe(out.rotation);
  });
});

describe("generationsToPurge", () => {
  it("keeps the newest generations (at least two), and every one of a grant a provider needs", () => {
    expect(generationsToPurge([1, 2, 3, 4, 5, 6, 7], 7, 5, false)).toEqual([1, 2]);
    expect(generationsToPurge([3, 1, 2], 3, 5, false)).toEqual([]);
    expect(generationsToPurge([1, 2, 3], 3, 1, false)).toEqual([1]);
    expect(generationsToPurge([1, 2, 3, 4, 5, 6, 7], 7, 2, true)).toEqual([]);
  });
});

describe("withRotatingCondition and nameHolders", () => {
  it("says AwaitingHolders while running, HolderTimedOut naming the missing when stalled, and is removed on commit", () => {
    const running = withRotatingCondition([], rotation(), T0);
    expect(getCondition(running, "Rotating")).toMatchObject({ status: "True", reason: "AwaitingHolders" });
    const stalled = withRotatingCondition(running, rotation(undefined, "Stalled"), at(1_000));
    expect(getCondition(stalled, "Rotating")).toMatchObject({ reason: "HolderTimedOut" });
    expect(getCondition(stalled, "Rotating")?.message).toContain("node-a/api, node-b/worker");
    expect(getCondition(withRotatingCondition(stalled, rotation(undefined, "Committed"), at(2_000)), "Rotating")).toBeUndefined();
    const none: never[] = [];
    expect(withRotatingCondition(none, rotation(undefined, "Committed"), T0)).toBe(none);
  });

  it("names the first few holders, then how many more", () => {
    expect(nameHolders(["a", "b"])).toBe("a, b");
    expect(nameHolders(["a", "b", "c", "d", "e", "f", "g"], 5)).toBe("a, b, c, d, e and 2 more");
  });
});
