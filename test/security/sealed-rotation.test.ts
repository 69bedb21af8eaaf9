/**
 * Rotation notices to SDK holders: the rotator tells each SDK holder of a rotation on the
 * holder's own subject, with generation k+1 sealed to the holder's registered xkey, so holders
 * apply it without a fetch round trip to the provisioner; a holder registered without an xkey
 * is told too and fetches; one holder's notice does not open with another holder's key;
 * nothing is stored; a holder that missed its notice is told again until it confirms; an SDK
 * holder whose confirmation was lost sends it again when told again, and when it is back from
 * a disconnect; two rotator instances share the confirmations without losing one.
 * Real nats-server, real resolver, provisioner and rotator.
 */
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import {
  Grant,
  HolderRegistration,
  Kinds,
  HolderNotice,
  ReplyLine,
  Rotation,
  RotationStates,
  SealedHolderPayload,
  connectNats,
  createLogger,
  createSealingKey,
  keys,
  openFrom,
  openStore,
  parseMasterKey,
  readJson,
  sealTo,
  sendConfirmation,
  subjects,
  type Confirmation,
  type ModuleDoc,
  type Store,
} from "@mesh/shared";
import { holdCredential, type CredentialHolder, type HeldCredential } from "@mesh/client";
import { startResolver, type Resolver } from "@mesh/resolver";
import { startProvisioner, type Provisioner } from "@mesh/provisioner";
import { startRotator, type Rotator } from "@mesh/rotator";
import { startNatsServer, type NatsServer } from "../harness/nats-server.js";
import { LogCapture } from "../harness/log-capture.js";

/** Short, so the test of a missed notice need not wait the default 5 s. */
const NOTICE_RESEND_MS = 1_000;

let nats: NatsServer;
let nc: NatsConnection;
let store: Store;
let resolver: Resolver;
let provisioner: Provisioner;
let rotator: Rotator;
let masterKey: ReturnType<typeof parseMasterKey>;
const conns: NatsConnection[] = [];
const logs = new LogCapture();
const log = () => createLogger("test", { destination: logs });

beforeAll(async () => {
  nats = await startNatsServer();
  nc = await connectNats(nats.url);
  store = await openStore(nc);
  masterKey = parseMasterKey(randomBytes(32).toString("hex"));
  resolver = await startResolver({ store, log: log() });
  provisioner = await startProvisioner({ store, masterKey, log: log() });
  rotator = await startRotator({ store, masterKey, log: log(), sweepMs: 500, noticeResendMs: NOTICE_RESEND_MS });
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

/** An SDK holder's registration whose key the test owns, to open what is sealed to it (it confirms by hand). */
async function registerSpy(module: string, instance: string) {
  const key = createSealingKey();
  const now = new Date().toISOString();
  const reg: HolderRegistration = { holder: `n1/app/${instance}`, grant: `${module}/key`, node: "n1", part: "app", instance, registeredAt: now, seenAt: now, xkey: key.getPublicKey() };
  await store.kv.holders.put(keys.holder(module, "key", "n1", "app", instance), JSON.stringify(reg));
  return key;
}

async function applySecretModule(module: string) {
  const doc = { kind: "Module", name: module, parts: [{ name: "app", node: "n1", installed: true }], requires: [{ name: "key", kind: Kinds.Secret }] } satisfies Partial<ModuleDoc>;
  const applied = await nc.request(subjects.apply, JSON.stringify({ documents: [doc] }), { timeout: 10_000 });
  expect((applied.json() as { ok: boolean }).ok).toBe(true);
  await waitUntil("generation 1", async () => ((await readJson(store.kv.grants, keys.grant(module, "key"), Grant))?.value.generation ?? 0) >= 1);
}

const committed = async (module: string) => (await readJson(store.kv.rotations, keys.grant(module, "key"), Rotation))?.value.state === RotationStates.Committed;

describe("rotations held by SDK instances", () => {
  it("reach each holder with its values sealed to it, open only for their holder, and an xkey-less holder is told and fetches", async () => {
    await applySecretModule("sealed");

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
    const spyKey = await registerSpy("sealed", "spy");
    const xkeyOf = new Map<string, string>();
    for (const i of ["h0", "h1"]) xkeyOf.set((await readJson(store.kv.holders, keys.holder("sealed", "key", "n1", "app", i), HolderRegistration))!.value.xkey!, i);
    xkeyOf.set(oldReg.xkey!, "old");

    // Watch every fetch request (a plain subscriber sees a copy of each) and every notice.
    const fetchesBy = new Map<string, number>();
    const fetchSub = nc.subscribe(subjects.credentialFetchesAll, {
      callback: (_e, m) => {
        const who = xkeyOf.get((m.json() as { recipient: string }).recipient) ?? "other";
        fetchesBy.set(who, (fetchesBy.get(who) ?? 0) + 1);
      },
    });
    const notices: Array<{ subject: string; m: HolderNotice; traceparent: string | undefined }> = [];
    const noticeSub = nc.subscribe("mesh.rotation.values.>", {
      callback: (_e, m) => void notices.push({ subject: m.subject, m: HolderNotice.parse(m.json()), traceparent: m.headers?.get("traceparent") || undefined }),
    });
    await nc.flush();

    const rotation = await rotator.rotate({ grant: "sealed/key" });
    expect(Object.keys(rotation.holders).sort()).toEqual(["n1/app/h0", "n1/app/h1", "n1/app/old", "n1/app/spy"]);
    await waitUntil("the spy's notice", () => notices.some((x) => x.m.holder === "n1/app/spy"));
    const spyMsg = notices.find((x) => x.m.holder === "n1/app/spy")!;
    const opened = SealedHolderPayload.parse(openFrom(spyKey, spyMsg.m.sender!, spyMsg.m.sealed!));
    expect(opened).toMatchObject({ rotation: rotation.id, holder: "n1/app/spy", generation: 2 });
    // The spy confirms by request, as a holder that wants to know may: answered once recorded.
    const line = new ReplyLine(nc, "rotator");
    const c: Confirmation = { rotation: rotation.id, grant: "sealed/key", holder: "n1/app/spy", generation: 2, confirmedAt: new Date().toISOString() };
    await sendConfirmation(line, c);
    expect((await readJson(store.kv.rotations, keys.grant("sealed", "key"), Rotation))!.value.holders["n1/app/spy"]?.c).toBeTypeOf("number");

    await waitUntil("the commit", () => committed("sealed"));
    // Sent again after the commit (its answer lost, say): a harmless repeat, answered ok.
    await sendConfirmation(line, c, { budgetMs: 5_000 });
    line.close();
    fetchSub.unsubscribe();
    noticeSub.unsubscribe();

    // Each SDK holder was told on its own subject, in the rotation's trace; the xkey-less one without values.
    expect([...new Set(notices.map((x) => x.subject))].sort()).toEqual(["h0", "h1", "old", "spy"].map((i) => subjects.holderValues("sealed", "key", "n1", "app", i)));
    expect(new Set(notices.map((x) => x.traceparent?.split("-")[1]))).toEqual(new Set([rotation.traceparent?.split("-")[1]]));
    const oldNotices = notices.filter((x) => x.m.holder === "n1/app/old");
    expect(oldNotices.every((x) => x.m.sealed === undefined && x.m.sender === undefined)).toBe(true);
    const sealedNotices = notices.filter((x) => x.m.holder !== "n1/app/old");
    expect(sealedNotices.every((x) => x.m.sealed !== undefined)).toBe(true);
    expect(new Set(sealedNotices.map((x) => x.m.sender)).size).toBe(1);
    // h0 and h1 applied generation 2 without a fetch; "old" fetched it; all got the same values.
    for (const i of ["h0", "h1", "old"]) {
      const u = got.get(i)!.find((x) => x.generation === 2);
      expect(u, i).toBeDefined();
      expect(u!.values).toEqual(opened.values);
    }
    expect(fetchesBy.get("h0") ?? 0).toBe(0);
    expect(fetchesBy.get("h1") ?? 0).toBe(0);
    expect(fetchesBy.get("old") ?? 0).toBeGreaterThanOrEqual(1);

    // One holder's notice does not open with another holder's key.
    const h0Msg = notices.find((x) => x.m.holder === "n1/app/h0")!;
    expect(() => openFrom(spyKey, h0Msg.m.sender!, h0Msg.m.sealed!)).toThrow(/did not open/);
    // Nothing sealed is at rest: no stream takes the per-holder subject.
    await expect(store.jsm.streams.find(h0Msg.subject)).rejects.toThrow();

    await Promise.all(holders.map((h) => h.stop()));
  }, 60_000);

  it("opens values sealed by the mesh's sealing key only: a forged notice pinning generation 999999 changes nothing", async () => {
    await applySecretModule("forged");
    const c = await connect({ servers: nats.url });
    conns.push(c);
    const h = await holdCredential(c, { module: "forged", part: "app", requirement: "key", node: "n1", instance: "victim" });
    const got: HeldCredential[] = [];
    void (async () => {
      for await (const u of h) {
        got.push(u);
        if (u.rotation) await u.confirm();
      }
    })();
    await waitUntil("the victim on generation 1", () => got.some((u) => u.generation === 1));
    const reg = (await readJson(store.kv.holders, keys.holder("forged", "key", "n1", "app", "victim"), HolderRegistration))!.value;

    // Whoever may publish on the notice subject can read the victim's public xkey and seal to it.
    const attacker = createSealingKey();
    const rotationId = "forged/key#999999";
    const forged: HolderNotice = {
      rotation: rotationId,
      grant: "forged/key",
      holder: reg.holder,
      generation: 999_999,
      sender: attacker.getPublicKey(),
      sealed: sealTo(attacker, reg.xkey!, { rotation: rotationId, holder: reg.holder, generation: 999_999, values: { value: "attacker's" } }),
    };
    const fetches: number[] = [];
    const fetchSub = nc.subscribe(subjects.credentialFetchesAll, { callback: (_e, m) => void fetches.push((m.json() as { generation: number }).generation) });
    await nc.flush();
    nc.publish(subjects.holderValues("forged", "key", "n1", "app", "victim"), JSON.stringify(forged));
    await nc.flush();
    // The victim did not open it: it asked the provisioner for generation 999999, which has none.
    await waitUntil("the victim's fetch of 999999", () => fetches.includes(999_999), 10_000);
    await new Promise((r) => setTimeout(r, 1_000));
    expect(got.map((u) => u.generation)).toEqual([1]);

    // A real rotation afterwards is held as usual, sealed by the mesh's key (the provisioner's too).
    await rotator.rotate({ grant: "forged/key" });
    await waitUntil("the victim on generation 2", () => got.some((u) => u.generation === 2));
    expect(got.find((u) => u.generation === 2)!.values.value).not.toBe("attacker's");
    expect(fetches.filter((g) => g === 2)).toEqual([]); // opened from its notice: the sender was the mesh's
    fetchSub.unsubscribe();
    await waitUntil("the commit", () => committed("forged"));
    await h.stop();
  }, 60_000);

  it("tells a holder that missed its notice again, and the rotation commits once it confirms", async () => {
    await applySecretModule("missed");
    const key = await registerSpy("missed", "late");
    const subject = subjects.holderValues("missed", "key", "n1", "app", "late");
    const rotation = await rotator.rotate({ grant: "missed/key" });
    expect(Object.keys(rotation.holders)).toEqual(["n1/app/late"]);
    // Listening only once the first notice has gone by (as after a lost message).
    await waitUntil("the first notice sent", async () => (await readJson(store.kv.rotations, keys.grant("missed", "key"), Rotation))?.value.state === RotationStates.AwaitingHolders);
    const told: HolderNotice[] = [];
    const sub = nc.subscribe(subject, { callback: (_e, m) => void told.push(HolderNotice.parse(m.json())) });
    await nc.flush();
    await waitUntil("the notice sent again", () => told.length > 0, 4 * NOTICE_RESEND_MS + 5_000);
    const opened = SealedHolderPayload.parse(openFrom(key, told[0]!.sender!, told[0]!.sealed!));
    expect(opened).toMatchObject({ rotation: rotation.id, holder: "n1/app/late", generation: 2 });
    const line = new ReplyLine(nc, "rotator");
    await sendConfirmation(line, { rotation: rotation.id, grant: "missed/key", holder: "n1/app/late", generation: 2, confirmedAt: new Date().toISOString() });
    line.close();
    await waitUntil("the commit", () => committed("missed"));
    // Nobody is told again once every holder confirmed.
    const after = told.length;
    await new Promise((r) => setTimeout(r, 2 * NOTICE_RESEND_MS + 600));
    expect(told.length).toBe(after);
    sub.unsubscribe();
  }, 60_000);

  it("records every confirmation once with two rotator instances answering them, and commits", async () => {
    await applySecretModule("pair");
    // A second instance on a connection of its own, in the same queue group as the first.
    const other = await connectNats(nats.url);
    conns.push(other);
    const second = await startRotator({ store: await openStore(other), masterKey, log: log(), sweepMs: 500, noticeResendMs: NOTICE_RESEND_MS });
    const confirmed: Promise<void>[] = [];
    const holders: CredentialHolder[] = [];
    for (let i = 0; i < 40; i++) {
      const c = await connect({ servers: nats.url });
      conns.push(c);
      const h = await holdCredential(c, { module: "pair", part: "app", requirement: "key", node: "n1", instance: `p${i}` });
      holders.push(h);
      confirmed.push(
        (async () => {
          // Awaited inside the loop: leaving a for-await stops the holder.
          for await (const u of h) {
            if (u.rotation) {
              await u.confirm();
              return;
            }
          }
        })(),
      );
    }
    const rotation = await rotator.rotate({ grant: "pair/key" });
    expect(Object.keys(rotation.holders)).toHaveLength(40);
    // Every holder confirmed; the record has each once, whichever instance took it.
    await Promise.all(confirmed);
    await waitUntil("the commit", () => committed("pair"));
    const r = (await readJson(store.kv.rotations, keys.grant("pair", "key"), Rotation))!.value;
    expect(Object.values(r.holders).every((p) => typeof p.c === "number")).toBe(true);
    expect(r.refused).toEqual([]);
    await second.stop();
    await Promise.all(holders.map((h) => h.stop()));
  }, 60_000);

  it("gives an instance that starts during a rotation the new generation, with nothing to confirm", async () => {
    await applySecretModule("joiner");
    const key = await registerSpy("joiner", "first");
    const rotation = await rotator.rotate({ grant: "joiner/key" });
    expect(Object.keys(rotation.holders)).toEqual(["n1/app/first"]);
    // Started while the rotation waits for "first": it is not among the rotation's holders.
    const c = await connect({ servers: nats.url });
    conns.push(c);
    const late = await holdCredential(c, { module: "joiner", part: "app", requirement: "key", node: "n1", instance: "late" });
    const got: HeldCredential[] = [];
    for await (const u of late) {
      got.push(u);
      if (u.generation === 2) break;
    }
    expect(got.map((u) => u.generation)).toEqual([1, 2]);
    expect(got[1]!.rotation).toBeUndefined();
    await got[1]!.confirm(); // nothing to send: it resolves at once
    // The first holder confirms; the rotation commits with nothing refused, on the values the late one took.
    const told = await new Promise<HolderNotice>((resolve) => {
      const sub = nc.subscribe(subjects.holderValues("joiner", "key", "n1", "app", "first"), {
        callback: (_e, m) => (sub.unsubscribe(), resolve(HolderNotice.parse(m.json()))),
      });
    });
    const opened = SealedHolderPayload.parse(openFrom(key, told.sender!, told.sealed!));
    expect(got[1]!.values).toEqual(opened.values);
    const line = new ReplyLine(nc, "rotator");
    await sendConfirmation(line, { rotation: rotation.id, grant: "joiner/key", holder: "n1/app/first", generation: 2, confirmedAt: new Date().toISOString() });
    line.close();
    await waitUntil("the commit", () => committed("joiner"));
    expect((await readJson(store.kv.rotations, keys.grant("joiner", "key"), Rotation))!.value.refused).toEqual([]);
  }, 60_000);

  /**
   * An SDK holder of `module`'s secret whose application confirms a rotation while no rotator
   * runs: the file's rotator is stopped once the holder took generation 2, and the
   * application's confirm() goes out after that (lost). Resolves then, with the rotation.
   */
  async function confirmWhileNoRotator(module: string) {
    await applySecretModule(module);
    const c = await connect({ servers: nats.url, reconnectTimeWait: 100, maxReconnectAttempts: -1 });
    conns.push(c);
    const h = await holdCredential(c, { module, part: "app", requirement: "key", node: "n1", instance: "x" });
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const taken: HeldCredential[] = [];
    let confirmed: Promise<void> | undefined;
    void (async () => {
      // Held on (leaving a for-await would stop the holder).
      for await (const u of h) {
        taken.push(u);
        if (u.rotation) {
          await gate;
          await (confirmed = u.confirm());
        }
      }
    })();
    await waitUntil("generation 1 held", () => taken.some((u) => u.generation === 1));
    const rotation = await rotator.rotate({ grant: `${module}/key` });
    await waitUntil("generation 2 taken", () => taken.some((u) => u.generation === 2));
    await rotator.stop();
    release();
    await waitUntil("the application's confirm()", () => confirmed !== undefined);
    await confirmed;
    await c.flush();
    const record = async () => (await readJson(store.kv.rotations, keys.grant(module, "key"), Rotation))!.value;
    expect((await record()).holders["n1/app/x"]?.c).toBeUndefined();
    return { holder: h, rotation, record };
  }

  // Last: it stops the file's rotator and starts another in its place.
  it("has an SDK holder send its confirmation again when told again, after it was lost", async () => {
    const { holder, rotation, record } = await confirmWhileNoRotator("lost");
    // A rotator comes back, tells the holder again as its record misses it, and the holder confirms again.
    rotator = await startRotator({ store, masterKey, log: log(), sweepMs: 500, noticeResendMs: NOTICE_RESEND_MS });
    await waitUntil("the commit", () => committed("lost"), 4 * NOTICE_RESEND_MS + 10_000);
    const r = await record();
    expect(r.id).toBe(rotation.id);
    expect(r.holders["n1/app/x"]?.c).toBeTypeOf("number");
    expect(r.refused).toEqual([]);
    expect(logs.lines.some((l) => l.includes(`rotation ${rotation.id}: told 1 SDK holders again`))).toBe(true);
    await holder.stop();
  }, 60_000);

  // Last too: it restarts the file's nats-server, and replaces the rotator.
  it("has an SDK holder that is back from a disconnect send its confirmation again when the record misses it", async () => {
    const { holder, record } = await confirmWhileNoRotator("away");
    // This rotator would not tell the holder again for ten minutes: only the holder's own catch-up can confirm in time.
    rotator = await startRotator({ store, masterKey, log: log(), sweepMs: 500, noticeResendMs: 600_000 });
    await new Promise((r) => setTimeout(r, 1_000));
    expect((await record()).holders["n1/app/x"]?.c).toBeUndefined();
    await nats.kill();
    await nats.restart();
    await waitUntil("the commit", () => committed("away").catch(() => false), 30_000);
    expect((await record()).holders["n1/app/x"]?.c).toBeTypeOf("number");
    await holder.stop();
  }, 90_000);
});
