/**
 * RotationRecords against a real nats-server: updates of one record by two instances (two
 * rotators) never lose one another's changes, whatever each instance last saw; a decision to
 * write nothing is taken on a fresh read, never on a stale copy.
 */
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RotationStates, type Grant, type Rotation } from "@mesh/shared";
import { connectNats, openStore, type Store } from "@mesh/shared/runtime";
import { grantFixture } from "../../../test/fixtures.js";
import { startNatsServer, type NatsServer } from "../../../test/harness/nats-server.js";
import { enter, newRotation } from "./rotation-machine.js";
import { RotationRecords } from "./rotation-records.js";

let nats: NatsServer;
let stores: Store[];

beforeAll(async () => {
  nats = await startNatsServer();
  stores = [await openStore(await connectNats(nats.url)), await openStore(await connectNats(nats.url))];
});

afterAll(async () => {
  for (const s of stores ?? []) await s.nc.close();
  await nats?.stop();
});

const holders = Array.from({ length: 40 }, (_, i) => `n1/app/h${i}`);

function fresh(): { key: string; rotation: Rotation } {
  const name = `m${randomBytes(4).toString("hex")}`;
  const grant: Grant = grantFixture({ id: `${name}/key`, module: name, requirement: "key", kind: "secret", provider: "builtin-secret", generation: 1 });
  return { key: `${name}.key`, rotation: newRotation({ grant, holders, resource: {}, timeoutMs: 60_000, now: new Date() }) };
}

/** `r` with `holder` confirmed (a pure update, as the rotator's). */
const confirm = (holder: string) => (r: Rotation | undefined) =>
  r && r.holders[holder]?.c === undefined ? { ...r, holders: { ...r.holders, [holder]: { c: 1 } } } : undefined;

describe("RotationRecords", () => {
  it("two instances updating one record at once lose nothing, though each writes first over what it last saw", async () => {
    const { key, rotation } = fresh();
    const [a, b] = stores.map((s) => new RotationRecords(s)) as [RotationRecords, RotationRecords];
    await a.write(key, undefined, rotation);
    await b.read(key);
    // Interleaved: every write of one instance makes the other's copy stale.
    await Promise.all(holders.map((h, i) => (i % 2 ? a : b).update(key, confirm(h))));
    const stored = (await a.read(key))!.value;
    expect(Object.values(stored.holders).every((p) => p.c === 1)).toBe(true);
  });

  it("state changes and confirmations of one instance follow each other without a conflict", async () => {
    const { key, rotation } = fresh();
    const records = new RotationRecords(stores[0]!);
    const start = await records.write(key, undefined, rotation);
    const moved = records.update(key, (r) => (r?.state === RotationStates.Staged ? enter(r, RotationStates.Broadcast, new Date()) : undefined));
    const confirmed = records.update(key, confirm("n1/app/h1"));
    expect((await moved).wrote).toBe(true);
    expect((await confirmed).wrote).toBe(true);
    const stored = (await records.read(key))!;
    expect(stored.value.state).toBe(RotationStates.Broadcast);
    expect(stored.value.holders["n1/app/h1"]).toEqual({ c: 1 });
    // Exactly the two writes, each over the result of the one before.
    expect(stored.revision).toBe(start.revision + 2);
  });

  it("decides to write nothing only on a fresh read, not on a stale copy", async () => {
    const { key, rotation } = fresh();
    const [a, b] = stores.map((s) => new RotationRecords(s)) as [RotationRecords, RotationRecords];
    await a.write(key, undefined, rotation);
    await b.read(key); // b's copy: Staged
    await a.update(key, (r) => (r ? enter(r, RotationStates.Broadcast, new Date()) : undefined));
    // Over its stale copy b would do nothing (not Broadcast yet); over the fresh record it writes.
    const out = await b.update(key, (r) => (r?.state === RotationStates.Broadcast ? enter(r, RotationStates.AwaitingHolders, new Date()) : undefined));
    expect(out.wrote).toBe(true);
    expect((await a.read(key))!.value.state).toBe(RotationStates.AwaitingHolders);
  });
});
