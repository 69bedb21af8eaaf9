import { describe, expect, it } from "vitest";
import { Rotation } from "@mesh/shared";
import { formatOutcome, formatStarted, formatTrace, progressLine, summarizeRotation, traceRotation } from "./rotation-view.js";
import { formatStatus } from "./status-format.js";
import { buildStatusReport } from "./status-report.js";
import { NOW, moduleStatus, readyDb } from "./test-fixtures.js";

const START = "2025-06-01T11:59:00.000Z";
const plus = (ms: number) => new Date(Date.parse(START) + ms).toISOString();

function rotation(over: Partial<Rotation> = {}): Rotation {
  return {
    id: "shop/db#3",
    grant: "shop/db",
    module: "shop",
    requirement: "db",
    kind: "postgres.database",
    provider: "pg-main",
    from: 2,
    to: 3,
    state: "AwaitingHolders",
    requestedAt: START,
    deadline: plus(60_000),
    holders: { "node-b/worker": {}, "node-a/api": { r: 12, a: 140, c: 151 } },
    broadcasts: [],
    resource: {},
    history: [
      { state: "Staged", at: START },
      { state: "Broadcast", at: plus(5) },
      { state: "AwaitingHolders", at: plus(9) },
    ],
    trigger: "manual",
    ...over,
  };
}

describe("summarizeRotation (meshctl rotate --json)", () => {
  it("has exactly the documented fields first, holders sorted with confirmedAt (null when missing), and the missing ones", () => {
    const s = summarizeRotation(rotation());
    expect(Object.keys(s).slice(0, 7)).toEqual(["rotation", "grant", "from", "to", "state", "holders", "missing"]);
    expect(s).toMatchObject({ rotation: "shop/db#3", grant: "shop/db", from: 2, to: 3, state: "AwaitingHolders", missing: ["node-b/worker"] });
    expect(s.holders).toEqual([
      { holder: "node-a/api", confirmedAt: plus(151) },
      { holder: "node-b/worker", confirmedAt: null },
    ]);
  });
});

describe("progress and outcome lines", () => {
  it("counts confirmations: confirmed N/M holders", () => {
    expect(progressLine(rotation())).toBe("confirmed 1/2 holders");
    expect(progressLine(rotation({ holders: { "node-a/api": { c: 1 } } }))).toBe("confirmed 1/1 holder");
  });

  it("says how far a handover's copy has come while it runs, from what the record says", () => {
    const copying = rotation({
      state: "Staged",
      trigger: "handover",
      fromProvider: "mesh-nats",
      holders: { "node-a/agent": {} },
      carrying: { total: 3, copied: 1, present: 1, bytes: 42 * 1024 * 1024 + 5, at: plus(2_000), artifact: "blob agent@sha256:ab" },
    });
    expect(progressLine(copying)).toBe("copying what it stores from mesh-nats: 2/3 artifacts, 42 MiB copied; confirmed 0/1 holder");
    // A record from before, or one past its copy, says confirmations alone.
    expect(progressLine({ ...copying, carrying: undefined })).toBe("confirmed 0/1 holder");
    expect(progressLine({ ...copying, state: "Broadcast" })).toBe("confirmed 0/1 holder");
  });

  it("says when it started and how many must confirm", () => {
    expect(formatStarted(rotation())).toBe(`rotation shop/db#3 started: grant shop/db, generation 2 → 3; 2 holders must confirm by ${plus(60_000)}`);
  });

  it("says Committed with how long it took", () => {
    const text = formatOutcome(rotation({ state: "Committed", committedAt: plus(1_500), holders: { "node-a/api": { c: 151 } } }), { width: 200 }).join(" ");
    expect(text).toBe("Committed: rotation shop/db#3, 1/1 holders confirmed in 1.5 s; grant shop/db is on generation 3, generation 2 is retired");
  });

  it("says Stalled naming the missing holders, that k still works and that it commits by itself", () => {
    const text = formatOutcome(rotation({ state: "Stalled" })).join(" ");
    expect(text).toContain("Stalled: rotation shop/db#3, 1 of 2 holders have not confirmed generation 3");
    expect(text).toContain("node-b/worker");
    expect(text).toContain("Generation 2 keeps working");
    expect(text).toContain("commits by itself");
  });
});

describe("traceRotation and formatTrace (meshctl trace)", () => {
  it("orders holders by confirmation, with offsets and absolute times, the unconfirmed last", () => {
    const t = traceRotation(rotation());
    expect(t.holders.map((h) => h.holder)).toEqual(["node-a/api", "node-b/worker"]);
    expect(t.holders[0]).toEqual({
      holder: "node-a/api",
      received: { offsetMs: 12, at: plus(12), clock: "holder" },
      applied: { offsetMs: 140, at: plus(140), clock: "holder" },
      confirmed: { offsetMs: 151, at: plus(151), clock: "rotator" },
    });
    expect(t.holders[1]).toMatchObject({ received: null, applied: null, confirmed: null });
    expect(t.states.map((s) => [s.state, s.offsetMs])).toEqual([
      ["Staged", 0],
      ["Broadcast", 5],
      ["AwaitingHolders", 9],
    ]);
    expect(t.missing).toEqual(["node-b/worker"]);
  });

  it("prints one block per holder: an older record's received and applied, and its confirmation", () => {
    const text = formatTrace(traceRotation(rotation()));
    expect(text).toContain("rotation shop/db#3  generation 2 → 3  AwaitingHolders");
    expect(text).toMatch(
      /node-a\/api\n {4}broadcast received +\+0\.012 s {2}2025-06-01T11:59:00\.012Z {2}holder's clock\n {4}applied +\+0\.140 s {2}2025-06-01T11:59:00\.140Z {2}holder's clock\n {4}confirmed +\+0\.151 s {2}\S+ {2}rotator's clock/,
    );
    expect(text).toMatch(/Staged +\+0\.000 s {2}\S+ {2}rotator's clock/);
    expect(text.replace(/\s+/g, " ")).toContain("a confirmation is the holder's JetStream ack of the broadcast, timed by the NATS server");
    expect(text).toMatch(/node-b\/worker\S* {2}not confirmed/);
    expect(text).toContain("not confirmed: node-b/worker");
  });

  it("prints a JetStream ack as the server's time, with its stream, consumer and sequence, and one found in an ack floor as found", () => {
    const r = rotation({
      holders: {
        "node-a/api": { c: 151, s: "MESH_HOLD_N_node-a", k: "shop_db_api", q: 9 },
        "node-b/worker/i-1": { c: 300, s: "MESH_HOLD_P_shop_node-b_worker", k: "db_i-1", q: 4, f: true },
      },
    });
    const t = traceRotation(r);
    expect(t.holders[0]).toMatchObject({
      holder: "node-a/api",
      stream: "MESH_HOLD_N_node-a",
      consumer: "shop_db_api",
      ackedSeq: 9,
      confirmed: { clock: "server" },
    });
    expect(t.holders[1]).toMatchObject({ holder: "node-b/worker/i-1", foundInAckFloor: true, confirmed: { clock: "rotator" } });
    const text = formatTrace(t);
    expect(text).toMatch(
      /node-a\/api\n {4}confirmed +\+0\.151 s {2}\S+ {2}server's clock\n {4}acknowledged seq 9 on consumer shop_db_api of stream MESH_HOLD_N_node-a/,
    );
    expect(text).toContain("confirmed (found)");
    for (const line of text.split("\n")) expect(line.length).toBeLessThanOrEqual(80);
  });

  it("names the holder's own stream and consumer for an ack the record keeps without them", () => {
    const t = traceRotation(rotation({ holders: { "node-a/api": { c: 151, q: 9 }, "node-b/worker/i-1": { c: 300, q: 4, f: true } } }));
    expect(t.holders[0]).toMatchObject({
      holder: "node-a/api",
      stream: "MESH_HOLD_N_node-a",
      consumer: "shop_db_api",
      ackedSeq: 9,
      confirmed: { clock: "server" },
    });
    expect(t.holders[1]).toMatchObject({
      stream: "MESH_HOLD_P_shop_node-b_worker",
      consumer: "db_i-1",
      foundInAckFloor: true,
      confirmed: { clock: "rotator" },
    });
  });

  it("reads an older record with refused confirmations, and shows nothing of them", () => {
    const old = Rotation.parse({
      ...rotation(),
      refused: [{ holder: "node-x/intruder", at: plus(50), reason: "node-x/intruder does not hold grant shop/db" }],
    });
    expect(old).not.toHaveProperty("refused");
    const t = traceRotation(old);
    expect(JSON.stringify(t)).not.toContain("refused");
    expect(formatTrace(t)).not.toContain("intruder");
  });
});

describe("meshctl status with a rotation", () => {
  const withRotation = (r: Rotation) => buildStatusReport([moduleStatus()], [readyDb], [], new Map(), NOW, new Map([["shop/db", r]]));

  it("adds a rotation field to the grant while one runs, and shows its progress", () => {
    const report = withRotation(rotation());
    expect(report.modules[0]!.grants[0]!.rotation).toEqual({
      id: "shop/db#3",
      from: 2,
      to: 3,
      state: "AwaitingHolders",
      confirmed: 1,
      total: 2,
      missing: ["node-b/worker"],
      requestedAt: START,
      deadline: plus(60_000),
    });
    expect(formatStatus(report, { now: NOW })).toContain("    rotating 2→3: confirmed 1/2 holders  AwaitingHolders, shop/db#3");
  });

  it("names the missing holders of a stalled one", () => {
    const text = formatStatus(withRotation(rotation({ state: "Stalled" })), { now: NOW });
    expect(text).toContain("    rotating 2→3: confirmed 1/2 holders  Stalled shop/db#3");
    expect(text).toContain("      missing: node-b/worker; generation 2 keeps working");
  });

  it("has no rotation field for a committed rotation or none", () => {
    expect(withRotation(rotation({ state: "Committed" })).modules[0]!.grants[0]).not.toHaveProperty("rotation");
    expect(buildStatusReport([moduleStatus()], [readyDb]).modules[0]!.grants[0]).not.toHaveProperty("rotation");
  });
});
