/**
 * Rotation values sealed to SDK holders: the rotator seals generation k+1 to each registered
 * holder's xkey on the holder's own subject before the broadcast, so holders apply it without
 * a fetch round trip to the provisioner; a holder registered without an xkey still fetches;
 * one holder's sealed message does not open with another holder's key; nothing is stored.
 * Real nats-server, real resolver, provisioner and rotator.
 */
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import {
  Grant,
  HolderRegistration,
  Kinds,
  Rotation,
  RotationBroadcast,
  RotationStates,
  SealedHolderPayload,
  SealedHolderValues,
  connectNats,
  createLogger,
  createSealingKey,
  keys,
  openFrom,
  openStore,
  parseMasterKey,
  readJson,
  subjects,
  type Confirmation,
  type ModuleDoc,
  type Store,
} from "@mesh/shared";
import { holdCredential, type CredentialHolder, type HeldCredential } from "@mesh/client";
import { startResolver, type Resolver } from "@mesh/resolver";
import { startProvisioner, type Provisioner } from "@mesh/provisioner";
import { startRotator, type Rotator } from "@mesh/rotator";
import { startNatsServer, type NatsServer } from "./harness/nats-server.js";
import { LogCapture } from "./harness/log-capture.js";

let nats: NatsServer;
let nc: NatsConnection;
let store: Store;
let resolver: Resolver;
let provisioner: Provisioner;
let rotator: Rotator;
const conns: NatsConnection[] = [];
const logs = new LogCapture();
const log = () => createLogger("test", { destination: logs });

beforeAll(async () => {
  nats = await startNatsServer();
  nc = await connectNats(nats.url);
  store = await openStore(nc);
  const masterKey = parseMasterKey(randomBytes(32).toString("hex"));
  resolver = await startResolver({ store, log: log() });
  provisioner = await startProvisioner({ store, masterKey, log: log() });
  rotator = await startRotator({ store, masterKey, log: log(), sweepMs: 500 });
});

afterAll(async () => {
  await rotator?.stop();
  await provisioner?.stop();
  await resolver?.stop();
  await Promise.all(conns.map((c) => c.close()));
  await nc?.close();
  await nats?.stop();
});

async function waitUntil(what: string, f: () => Promise<boolean> | boolean, timeoutMs = 20_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await f())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe("rotation values sealed to SDK holders", () => {
  it("reach each holder without a fetch, open only for their holder, and an xkey-less holder still fetches", async () => {
    const doc = { kind: "Module", name: "sealed", parts: [{ name: "app", node: "n1", installed: true }], requires: [{ name: "key", kind: Kinds.Secret }] } satisfies Partial<ModuleDoc>;
    const applied = await nc.request(subjects.apply, JSON.stringify({ documents: [doc] }), { timeout: 10_000 });
    expect((applied.json() as { ok: boolean }).ok).toBe(true);
    await waitUntil("generation 1", async () => ((await readJson(store.kv.grants, keys.grant("sealed", "key"), Grant))?.value.generation ?? 0) >= 1);

    // Three SDK holders on their own connections; each records what it applied.
    const holders: CredentialHolder[] = [];
    const got = new Map<string, HeldCredential[]>();
    for (const instance of ["h0", "h1", "old"]) {
      const c = await connect({ servers: nats.url });
      conns.push(c);
      const h = await holdCredential(c, { module: "sealed", part: "app", requirement: "key", node: "n1", instance });
      holders.push(h);
      got.set(instance, []);
      void (async () => {
        for await (const u of h) {
          got.get(instance)!.push(u);
          if (u.rotation) await u.confirm();
        }
      })();
    }
    await waitUntil("holders on generation 1", () => [...got.values()].every((l) => l.some((u) => u.generation === 1)));

    // "old" looks like an instance registered before xkeys: no xkey in its registration.
    const oldKey = keys.holder("sealed", "key", "n1", "app", "old");
    const oldReg = (await readJson(store.kv.holders, oldKey, HolderRegistration))!.value;
    expect(oldReg.xkey).toMatch(/^X[A-Z2-7]{55}$/);
    const { xkey: _dropped, ...withoutXkey } = oldReg;
    await store.kv.holders.put(oldKey, JSON.stringify(withoutXkey));
    // A holder whose key the test owns, to open what is sealed to it (it confirms by hand).
    const spyKey = createSealingKey();
    const now = new Date().toISOString();
    const spy: HolderRegistration = { holder: "n1/app/spy", grant: "sealed/key", node: "n1", part: "app", instance: "spy", registeredAt: now, seenAt: now, xkey: spyKey.getPublicKey() };
    await store.kv.holders.put(keys.holder("sealed", "key", "n1", "app", "spy"), JSON.stringify(spy));
    const xkeyOf = new Map<string, string>();
    for (const i of ["h0", "h1"]) xkeyOf.set((await readJson(store.kv.holders, keys.holder("sealed", "key", "n1", "app", i), HolderRegistration))!.value.xkey!, i);
    xkeyOf.set(oldReg.xkey!, "old");

    // Watch every fetch request (a plain subscriber sees a copy of each) and every sealed message.
    const fetchesBy = new Map<string, number>();
    const fetchSub = nc.subscribe(subjects.credentialFetch, {
      callback: (_e, m) => {
        const who = xkeyOf.get((m.json() as { recipient: string }).recipient) ?? "other";
        fetchesBy.set(who, (fetchesBy.get(who) ?? 0) + 1);
      },
    });
    const sealedMsgs: Array<{ subject: string; m: SealedHolderValues }> = [];
    const sealedSub = nc.subscribe("mesh.rotation.values.>", { callback: (_e, m) => void sealedMsgs.push({ subject: m.subject, m: SealedHolderValues.parse(m.json()) }) });
    const broadcasts: RotationBroadcast[] = [];
    const broadcastSub = nc.subscribe(subjects.rotationBroadcast("sealed", "key"), { callback: (_e, m) => void broadcasts.push(RotationBroadcast.parse(m.json())) });
    await nc.flush();

    const rotation = await rotator.rotate({ grant: "sealed/key" });
    expect(Object.keys(rotation.holders).sort()).toEqual(["n1/app/h0", "n1/app/h1", "n1/app/old", "n1/app/spy"]);
    await waitUntil("the spy's sealed values", () => sealedMsgs.some((x) => x.m.holder === "n1/app/spy"));
    const spyMsg = sealedMsgs.find((x) => x.m.holder === "n1/app/spy")!;
    const opened = SealedHolderPayload.parse(openFrom(spyKey, spyMsg.m.sender, spyMsg.m.sealed));
    expect(opened).toMatchObject({ rotation: rotation.id, holder: "n1/app/spy", generation: 2 });
    const c: Confirmation = { rotation: rotation.id, grant: "sealed/key", holder: "n1/app/spy", generation: 2, confirmedAt: new Date().toISOString() };
    await store.js.publish(subjects.rotationConfirm("sealed", "key"), JSON.stringify(c), { msgID: `${rotation.id}:spy` });

    await waitUntil("the commit", async () => (await readJson(store.kv.rotations, keys.grant("sealed", "key"), Rotation))?.value.state === RotationStates.Committed);
    fetchSub.unsubscribe();
    sealedSub.unsubscribe();
    broadcastSub.unsubscribe();

    // Each holder with an xkey got its own message, on its own subject; the xkey-less one none.
    expect(sealedMsgs.map((x) => x.subject).sort()).toEqual(["h0", "h1", "spy"].map((i) => subjects.holderValues("sealed", "key", "n1", "app", i)));
    // Sealed before the broadcast, by the sender the broadcast names.
    expect(broadcasts).toHaveLength(1);
    expect(new Set(sealedMsgs.map((x) => x.m.sender))).toEqual(new Set([broadcasts[0]!.sender]));
    // h0 and h1 applied generation 2 without a fetch; "old" fetched it; all got the same values.
    for (const i of ["h0", "h1", "old"]) {
      const u = got.get(i)!.find((x) => x.generation === 2);
      expect(u, i).toBeDefined();
      expect(u!.values).toEqual(opened.values);
    }
    expect(fetchesBy.get("h0") ?? 0).toBe(0);
    expect(fetchesBy.get("h1") ?? 0).toBe(0);
    expect(fetchesBy.get("old") ?? 0).toBeGreaterThanOrEqual(1);

    // One holder's message does not open with another holder's key (nor does a forged copy on its subject get used).
    const h0Msg = sealedMsgs.find((x) => x.m.holder === "n1/app/h0")!;
    expect(() => openFrom(spyKey, h0Msg.m.sender, h0Msg.m.sealed)).toThrow(/did not open/);
    // Nothing sealed is at rest: no stream takes the per-holder subject.
    await expect(store.jsm.streams.find(h0Msg.subject)).rejects.toThrow();

    await Promise.all(holders.map((h) => h.stop()));
  }, 60_000);
});
