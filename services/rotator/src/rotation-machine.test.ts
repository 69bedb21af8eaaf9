import { describe, expect, it } from "vitest";
import {
  RotationStates,
  getCondition,
  holderAckedOn,
  holderEndpoint,
  type Grant,
  type HolderRegistration,
  type Rotation,
  type RotationState,
} from "@mesh/shared";
import { grantFixture } from "../../../test/fixtures.js";
import {
  IllegalTransition,
  TRANSITIONS,
  ACK_LOOKUP_AFTER_MS,
  ackLookupDue,
  confirmedCount,
  evictHolders,
  generationsToPurge,
  allConfirmed,
  enter,
  holdersOf,
  missingHolders,
  nameHolders,
  newRotation,
  nextStep,
  withAcks,
  withRepublished,
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

/** The ack of `holder`'s consumer, as the server's ack metric says it, `ms` after T0. */
function ack(holder: string, ms: number, found?: true) {
  return [
    holder,
    { at: T0.getTime() + ms, stream: "MESH_HOLD_N_x", consumer: `c_${holder.replace(/\//g, "_")}`, seq: 7, ...(found ? { found } : {}) },
  ] as const;
}
const acked = (r: Rotation, ...holders: Array<[string, number]>) => withAcks(r, new Map(holders.map(([h, ms]) => ack(h, ms))));

describe("holdersOf", () => {
  it.each([
    { name: "agents holding a generation of a target part", g: grant(), regs: [], want: ["node-a/api", "node-b/worker"] },
    {
      name: "not a part that is no longer a target, nor one never delivered",
      g: grant({
        targets: [
          { part: "api", node: "node-a" },
          { part: "cron", node: "node-c" },
        ],
        holders: {
          "node-a/api": { generation: 1, deliveredAt: "" },
          "node-b/worker": { generation: 1, deliveredAt: "" },
          "node-c/cron": { generation: 0, deliveredAt: "" },
        },
      }),
      regs: [],
      want: ["node-a/api"],
    },
    {
      name: "SDK instances of a target part seen recently, not stale ones, nor other grants' or non-targets'",
      g: grant({ holders: {} }),
      regs: [
        registration("node-a", "api", "i1", 1_000),
        registration("node-a", "api", "old", 10 * 60_000),
        registration("node-a", "api", "x", 0, "shop/other"),
        registration("node-z", "api", "i2"),
      ],
      want: ["node-a/api/i1"],
    },
  ])("$name", ({ g, regs, want }) => {
    expect(holdersOf(g, regs, T0)).toEqual(want);
  });
});

describe("newRotation and enter", () => {
  it("starts Staged at k+1 with every holder unconfirmed and the deadline from the timeout", () => {
    const r = newRotation({ grant: grant(), holders: ["node-a/api"], resource: { role: "x" }, timeoutMs: 5_000, now: T0, trigger: "schedule" });
    expect(r).toMatchObject({
      id: "shop/key#2",
      from: 1,
      to: 2,
      state: "Staged",
      deadline: at(5_000).toISOString(),
      holders: { "node-a/api": {} },
      trigger: "schedule",
    });
    expect(r.history).toEqual([{ state: "Staged", at: T0.toISOString() }]);
  });

  it("appends history on a change, sets committedAt on commit, and is a no-op for the same state", () => {
    const r = rotation(undefined, RotationStates.Staged);
    const b = enter(r, RotationStates.Broadcast, at(10));
    expect(b.history.map((h) => h.state)).toEqual(["Staged", "Broadcast"]);
    expect(enter(b, RotationStates.Broadcast, at(20))).toBe(b);
    const c = enter(enter(b, RotationStates.AwaitingHolders, at(25)), RotationStates.Committed, at(30));
    expect(c.history.map((h) => h.state)).toEqual(["Staged", "Broadcast", "AwaitingHolders", "Committed"]);
    expect(c.committedAt).toBe(at(30).toISOString());
    expect(b.committedAt).toBeUndefined();
  });
});

describe("ackLookupDue", () => {
  it("leaves a rotation's acks to the metrics until ACK_LOOKUP_AFTER_MS after its broadcast", () => {
    const staged = rotation(undefined, RotationStates.Staged);
    expect(ackLookupDue(staged, at(60_000))).toBe(false);
    const broadcast = enter(staged, RotationStates.Broadcast, at(10));
    const awaiting = enter(broadcast, RotationStates.AwaitingHolders, at(20));
    for (const r of [broadcast, awaiting]) {
      expect(ackLookupDue(r, at(10 + ACK_LOOKUP_AFTER_MS - 1))).toBe(false);
      expect(ackLookupDue(r, at(10 + ACK_LOOKUP_AFTER_MS))).toBe(true);
    }
  });

  it("looks at a running rotation whose record has no broadcast in its history", () => {
    expect(ackLookupDue(rotation(), T0)).toBe(true);
  });
});

describe("nextStep: the transitions", () => {
  const confirmedAll = (r: Rotation): Rotation => ({ ...r, holders: Object.fromEntries(Object.keys(r.holders).map((h) => [h, { c: 100 }])) });
  const cases: Array<{ name: string; r: Rotation; now: Date; want: ReturnType<typeof nextStep> }> = [
    { name: "Staged → broadcast", r: rotation(undefined, "Staged"), now: at(0), want: { action: "broadcast" } },
    { name: "Broadcast → await", r: rotation(undefined, "Broadcast"), now: at(0), want: { action: "await" } },
    {
      name: "AwaitingHolders before the deadline, holders missing → wait until the deadline",
      r: rotation(),
      now: at(500),
      want: { action: "wait", untilMs: at(1_000).getTime() },
    },
    {
      name: "AwaitingHolders at the deadline, holders missing → stall naming them",
      r: rotation(),
      now: at(1_000),
      want: { action: "stall", missing: ["node-a/api", "node-b/worker"] },
    },
    { name: "AwaitingHolders, all confirmed → commit", r: confirmedAll(rotation()), now: at(500), want: { action: "commit" } },
    {
      name: "AwaitingHolders past the deadline but all confirmed → commit, not stall",
      r: confirmedAll(rotation()),
      now: at(5_000),
      want: { action: "commit" },
    },
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
    r = acked(r, ["node-a/api", 200]);
    const step = nextStep(r, at(1_500));
    expect(step).toEqual({ action: "stall", missing: ["node-b/worker"] });
    r = enter(r, RotationStates.Stalled, at(1_500));
    expect(withRotatingCondition([], r, at(1_500))[0]?.message).toContain("node-b/worker");
    expect(nextStep(r, at(2_000))).toEqual({ action: "none" });
    r = acked(r, ["node-b/worker", 60_000]);
    expect(missingHolders(r)).toEqual([]);
    expect(nextStep(r, at(60_000))).toEqual({ action: "commit" });
  });
});

describe("withAcks", () => {
  it("marks each holder whose consumer acknowledged, with the server's time as an offset, its stream, consumer and sequence", () => {
    const r = { ...rotation(), requestedAt: T0.toISOString() };
    const out = withAcks(r, new Map([ack("node-a/api", 150), ack("node-z/stranger", 10)]));
    expect(out.holders["node-a/api"]).toEqual({ c: 150, s: "MESH_HOLD_N_x", k: "c_node-a_api", q: 7 });
    // An ack of a consumer that is not one of the rotation's holders adds nothing.
    expect(Object.keys(out.holders).sort()).toEqual(["node-a/api", "node-b/worker"]);
    expect(missingHolders(out)).toEqual(["node-b/worker"]);
    expect(confirmedCount(out)).toBe(1);
  });

  it("marks an ack found in an ack floor, keeps a confirmation recorded before, and is the same object with no acks", () => {
    const r = { ...rotation(), requestedAt: T0.toISOString() };
    const found = withAcks(r, new Map([ack("node-b/worker", 90, true)]));
    expect(found.holders["node-b/worker"]).toMatchObject({ c: 90, f: true });
    expect(withAcks(found, new Map([ack("node-b/worker", 500)])).holders["node-b/worker"]!.c).toBe(90);
    expect(withAcks(r, new Map())).toBe(r);
  });

  it("names no stream or consumer for an ack on the holder's own endpoint, which holderAckedOn derives", () => {
    const r = { ...rotation(["node-a/api", "node-b/worker/i-1"]), requestedAt: T0.toISOString() };
    const own = (h: string, seq: number) => {
      const e = holderEndpoint(r.grant, h)!;
      return [h, { at: T0.getTime() + 20, stream: e.stream, consumer: e.consumer, seq }] as const;
    };
    const out = withAcks(r, new Map([own("node-a/api", 3), own("node-b/worker/i-1", 5)]));
    expect(out.holders["node-a/api"]).toEqual({ c: 20, q: 3 });
    expect(out.holders["node-b/worker/i-1"]).toEqual({ c: 20, q: 5 });
    expect(holderAckedOn(r.grant, "node-a/api", out.holders["node-a/api"]!)).toEqual({ stream: "MESH_HOLD_N_node-a", consumer: "shop_key_api" });
    expect(holderAckedOn(r.grant, "node-b/worker/i-1", out.holders["node-b/worker/i-1"]!)).toEqual({
      stream: "MESH_HOLD_P_shop_node-b_worker",
      consumer: "key_i-1",
    });
    // Not acknowledged: nowhere.
    expect(holderAckedOn(r.grant, "node-a/api", {})).toBeUndefined();
  });
});

describe("withRepublished", () => {
  it("replaces the broadcasts published again, keeps the others, adds a stream not reached before, and counts each round", () => {
    const a = { stream: "MESH_HOLD_N_node-a", subject: "mesh.rotation.node.node-a.shop.key.api", seq: 7 };
    const b = { stream: "MESH_HOLD_N_node-b", subject: "mesh.rotation.node.node-b.shop.key.worker", seq: 9 };
    const r = { ...rotation(), broadcasts: [a, b] };
    const once = withRepublished(r, [{ ...b, seq: 4 }]);
    expect(once.broadcasts).toEqual([a, { ...b, seq: 4 }]);
    expect(once.republished).toBe(1);
    expect(r.broadcasts).toEqual([a, b]);
    const c = { stream: "MESH_HOLD_P_x", subject: "mesh.rotation.part.x", seq: 1 };
    const twice = withRepublished(once, [{ ...b, seq: 4 }, c]);
    expect(twice.broadcasts).toEqual([a, { ...b, seq: 4 }, c]);
    expect(twice.republished).toBe(2);
  });
});

describe("TRANSITIONS: the rotation's state machine", () => {
  const states = Object.values(RotationStates) as RotationState[];
  it.each(states.flatMap((from) => states.filter((to) => to !== from).map((to) => ({ from, to }))))(
    "$from → $to is allowed exactly when the table has it",
    ({ from, to }) => {
      const r = rotation(undefined, from);
      if (TRANSITIONS[from].includes(to)) expect(enter(r, to, at(1)).state).toBe(to);
      else expect(() => enter(r, to, at(1))).toThrow(IllegalTransition);
    },
  );

  it("every state is reachable from Staged, Committed only ends it, and every step nextStep asks for is in the table", () => {
    const seen = new Set<RotationState>([RotationStates.Staged]);
    for (let grew = true; grew;) {
      grew = false;
      for (const s of [...seen]) {
        for (const t of TRANSITIONS[s]) {
          if (seen.has(t)) continue;
          seen.add(t);
          grew = true;
        }
      }
    }
    expect([...seen].sort()).toEqual([...states].sort());
    expect(TRANSITIONS[RotationStates.Committed]).toEqual([]);
    const moves: Record<string, RotationState> = {
      broadcast: RotationStates.Broadcast,
      await: RotationStates.AwaitingHolders,
      stall: RotationStates.Stalled,
      commit: RotationStates.Committed,
    };
    for (const state of states) {
      const cases: Array<[Rotation, Date]> = [
        [rotation(undefined, state), at(0)],
        [rotation(undefined, state), at(5_000)],
        [acked(rotation(undefined, state), ["node-a/api", 1], ["node-b/worker", 2]), at(0)],
      ];
      for (const [r, now] of cases) {
        const to = moves[nextStep(r, now).action];
        if (to) expect(TRANSITIONS[state], `${state} → ${to}`).toContain(to);
      }
    }
  });
});

describe("allConfirmed", () => {
  it("is true only when no holder is missing (and for no holders at all)", () => {
    const r = rotation();
    expect(allConfirmed(r)).toBe(false);
    const half = acked(r, ["node-a/api", 100]);
    expect(allConfirmed(half)).toBe(false);
    expect(allConfirmed(acked(half, ["node-b/worker", 200]))).toBe(true);
    expect(allConfirmed(rotation([]))).toBe(true);
  });
});

describe("evictHolders", () => {
  it("stops waiting for the holders named, leaves the confirmed alone, and lists the ones it does not have", () => {
    const half = acked(rotation(), ["node-a/api", 100]);
    const out = evictHolders(half, ["node-b/worker", "node-a/api", "node-z/nope"], at(300));
    expect(out.evicted).toEqual(["node-b/worker"]);
    expect(out.confirmed).toEqual(["node-a/api"]);
    expect(out.unknown).toEqual(["node-z/nope"]);
    expect(out.rotation.holders["node-b/worker"]!.e).toBeGreaterThanOrEqual(0);
    expect(allConfirmed(out.rotation)).toBe(true);
    expect(missingHolders(out.rotation)).toEqual([]);
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
