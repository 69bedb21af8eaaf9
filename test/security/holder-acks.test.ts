/**
 * Rotations held by SDK instances, as JetStream carries them: each instance's consumer (made by
 * the control plane when it registers) delivers the broadcast, the instance fetches k+1 sealed
 * to itself, and its confirmation is its ack of the broadcast, sent only when the application
 * calls confirm(): a holder that does not apply never acks, and the rotation waits. A forged
 * broadcast moves no holder to a generation the mesh did not make; two rotator instances count
 * the same acks and commit once; an instance that joins during a rotation takes k+1 with nothing
 * waiting for it. Real nats-server, real resolver, provisioner and rotator.
 */
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import {
  Grant,
  Kinds,
  Rotation,
  RotationStates,
  createSealingKey,
  holderEndpoint,
  keys,
  readHolderAcks,
  subjects as S,
  parseMasterKey,
  subjects,
  type ModuleDoc,
} from "@mesh/shared";
import { connectNats, fetchCredential, openStore, readJson, type Store } from "@mesh/shared/runtime";
import { createLogger } from "@mesh/shared/service";
import { holdCredential, type CredentialHolder, type HeldCredential } from "@mesh/client";
import { startResolver, type Resolver } from "@mesh/resolver";
import { startProvisioner, type Provisioner } from "@mesh/provisioner";
import { startRotator, type Rotator } from "@mesh/rotator";
import { startNatsServer, type NatsServer } from "../harness/nats-server.js";
import { LogCapture } from "../harness/log-capture.js";
import { expectAcksInConsumers } from "../harness/holder-acks.js";
import { waitFor } from "../harness/wait.js";

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

/** Polls `f` every 20 ms until it is true (harness/wait.ts), failing after `timeoutMs` saying what it waited for. */
async function waitUntil(what: string, f: () => Promise<boolean> | boolean, timeoutMs = 20_000): Promise<void> {
  await waitFor(what, f, timeoutMs, 20);
}

async function applySecretModule(module: string) {
  const doc = {
    kind: "Module",
    name: module,
    parts: [{ name: "app", node: "n1", installed: true }],
    requires: [{ name: "key", kind: Kinds.Secret }],
  } satisfies Partial<ModuleDoc>;
  const applied = await nc.request(subjects.apply, JSON.stringify({ documents: [doc] }), { timeout: 10_000 });
  expect((applied.json() as { ok: boolean }).ok).toBe(true);
  await waitUntil("generation 1", async () => ((await readJson(store.kv.grants, keys.grant(module, "key"), Grant))?.value.generation ?? 0) >= 1);
}

const committed = async (module: string) => (await readJson(store.kv.rotations, keys.grant(module, "key"), Rotation))?.value.state === RotationStates.Committed;

/** When a holder's application may confirm: open from the start, or once the test opens it (never, for one that cannot apply). */
interface Gate {
  readonly opened: Promise<void>;
  open(): void;
}

function gate(open = false): Gate {
  let release!: () => void;
  const opened = new Promise<void>((resolve) => (release = resolve));
  if (open) release();
  return { opened, open: release };
}

describe("rotations held by SDK instances", () => {
  const rotationOf = async (module: string) => (await readJson(store.kv.rotations, keys.grant(module, "key"), Rotation))!.value;
  const hold = async (module: string, instance: string) => {
    const c = await connect({ servers: nats.url });
    conns.push(c);
    return holdCredential(c, { module, part: "app", requirement: "key", node: "n1", instance });
  };
  /** The holder's updates, collected as they come; it confirms a rotation's once `confirming` is open. */
  const follow = (h: CredentialHolder, confirming: Gate) => {
    const got: HeldCredential[] = [];
    void (async () => {
      for await (const u of h) {
        got.push(u);
        if (!u.rotation) continue;
        await confirming.opened;
        await u.confirm();
      }
    })();
    return got;
  };

  it("each holder confirms by acking the broadcast on its own consumer, after it applied: the rotation commits after the last, and JetStream's consumers show every ack", async () => {
    await applySecretModule("acks");
    const lateMayConfirm = gate();
    const quick = [await hold("acks", "q1"), await hold("acks", "q2")];
    const late = await hold("acks", "late");
    const got = [...quick.map((h) => follow(h, gate(true))), follow(late, lateMayConfirm)];
    await waitUntil("every holder on generation 1", () => got.every((g) => g.some((u) => u.generation === 1)));
    // k+1 comes in the broadcast, under the part's key each instance got with generation 1: none fetches it.
    let fetches = 0;
    const spy = nc.subscribe(S.credentialFetch("acks", "key", "n1", "app"), { callback: () => void fetches++ });
    const rotation = await rotator.rotate({ grant: "acks/key" });
    expect(Object.keys(rotation.holders).sort()).toEqual(["n1/app/late", "n1/app/q1", "n1/app/q2"]);
    await waitUntil("every holder given generation 2", () => got.every((g) => g.some((u) => u.generation === 2)));
    spy.unsubscribe();
    expect(fetches).toBe(0);
    const fetched = await fetchCredential(nc, { grant: "acks/key", part: "app", node: "n1", generation: 2 }, createSealingKey());
    expect(got.map((g) => g.find((u) => u.generation === 2)!.values)).toEqual([fetched.values, fetched.values, fetched.values]);
    // The late one has generation 2 but has not confirmed: its consumer has not acknowledged, and
    // nothing commits. Once the rotator has counted the two that did, a commit would have come
    // with the count: it did not.
    await waitUntil("the rotator counted the two quick confirmations", async () => (await rotationOf("acks")).confirmed === 2);
    const running = await rotationOf("acks");
    expect(running.state).not.toBe(RotationStates.Committed);
    const live = await readHolderAcks(store.jsm, running);
    expect(
      live
        .filter((h) => h.acked)
        .map((h) => h.holder)
        .sort(),
    ).toEqual(["n1/app/q1", "n1/app/q2"]);
    expect(live.find((h) => h.holder === "n1/app/late")!.ackFloor).toBeLessThan(running.broadcasts[0]!.seq);
    lateMayConfirm.open();
    await waitUntil("the commit", () => committed("acks"));
    await expectAcksInConsumers({ store }, await rotationOf("acks"));
    await Promise.all([...quick, late].map((h) => h.stop()));
  }, 60_000);

  it("a holder that does not apply never acknowledges: the rotation stalls naming it, the old generation is kept, and its consumer's ack floor says so", async () => {
    await applySecretModule("noapply");
    const ok = await hold("noapply", "ok");
    const broken = await hold("noapply", "broken");
    // The application of "broken" fails to switch, so it never calls confirm().
    follow(ok, gate(true));
    const brokenGot = follow(broken, gate());
    await waitUntil("both on generation 1", async () => brokenGot.some((u) => u.generation === 1));
    await rotator.rotate({ grant: "noapply/key", timeoutMs: 1_500 });
    await waitUntil("the stall", async () => (await rotationOf("noapply")).state === RotationStates.Stalled);
    const r = await rotationOf("noapply");
    expect(
      Object.entries(r.holders)
        .filter(([, p]) => p.c === undefined)
        .map(([h]) => h),
    ).toEqual(["n1/app/broken"]);
    const e = holderEndpoint("noapply/key", "n1/app/broken")!;
    const info = await store.jsm.consumers.info(e.stream, e.consumer);
    expect(info.ack_floor.stream_seq).toBeLessThan(r.broadcasts.find((b) => b.stream === e.stream)!.seq);
    expect(info.num_ack_pending).toBe(1);
    expect((await readJson(store.kv.grants, keys.grant("noapply", "key"), Grant))!.value.generation).toBe(1);
    await Promise.all([ok.stop(), broken.stop()]);
  }, 60_000);

  it("a forged broadcast moves no holder: the generation it names is fetched from the provisioner, which has none", async () => {
    await applySecretModule("forged");
    const victim = await hold("forged", "victim");
    const got = follow(victim, gate(true));
    await waitUntil("generation 1", () => got.some((u) => u.generation === 1));
    const forged = {
      rotation: "forged/key#999999",
      grant: "forged/key",
      module: "forged",
      requirement: "key",
      kind: Kinds.Secret,
      provider: "builtin-secret",
      from: 1,
      to: 999_999,
      publishedAt: new Date().toISOString(),
    };
    // The holder asks the provisioner for the generation the broadcast names; the provisioner's
    // answer goes to the holder's inbox, where this connection listens too.
    const asked = new Set<string>();
    const answers: Array<{ ok: boolean; error?: { code: string } }> = [];
    const fetches = nc.subscribe(S.credentialFetch("forged", "key", "n1", "app"), {
      callback: (_, m) => {
        if (m.reply && (m.json() as { generation?: number }).generation === 999_999) asked.add(m.reply);
      },
    });
    const replies = nc.subscribe("_INBOX.>", { callback: (_, m) => void (asked.has(m.subject) && answers.push(m.json())) });
    await nc.flush();
    await store.js.publish(S.partRotation("forged", "n1", "app", "key"), JSON.stringify(forged));
    await waitUntil("the provisioner's answer to the victim's fetch of generation 999999", () => answers.length > 0);
    fetches.unsubscribe();
    replies.unsubscribe();
    expect(answers[0]).toMatchObject({ ok: false, error: { code: "NotFound" } });
    expect(got.map((u) => u.generation)).toEqual([1]);
    await victim.stop();
  }, 30_000);

  it("counts every ack once with two rotator instances, and commits once", async () => {
    await applySecretModule("pair");
    const other = await connectNats(nats.url);
    conns.push(other);
    const second = await startRotator({ store: await openStore(other), masterKey, log: log(), sweepMs: 500 });
    const holders: CredentialHolder[] = [];
    const gots: HeldCredential[][] = [];
    for (let i = 0; i < 40; i++) {
      const h = await hold("pair", `p${i}`);
      holders.push(h);
      gots.push(follow(h, gate(true)));
    }
    await waitUntil("every holder on generation 1", () => gots.every((g) => g.some((u) => u.generation === 1)));
    const rotation = await rotator.rotate({ grant: "pair/key" });
    expect(Object.keys(rotation.holders)).toHaveLength(40);
    await waitUntil("the commit", () => committed("pair"));
    const r = await rotationOf("pair");
    expect(Object.values(r.holders).every((p) => typeof p.c === "number")).toBe(true);
    expect(r.history.filter((h) => h.state === RotationStates.Committed)).toHaveLength(1);
    await expectAcksInConsumers({ store }, r);
    await second.stop();
    await Promise.all(holders.map((h) => h.stop()));
  }, 60_000);

  it("gives an instance that starts during a rotation the new generation, with nothing waiting for it", async () => {
    await applySecretModule("joiner");
    const firstMayConfirm = gate();
    const first = await hold("joiner", "first");
    follow(first, firstMayConfirm);
    // The rotator has the instance's registration once it has made the instance's consumer (it makes it on seeing the registration).
    const endpoint = holderEndpoint("joiner/key", "n1/app/first")!;
    await waitUntil("the rotator to make the first instance's consumer", () =>
      store.jsm.consumers.info(endpoint.stream, endpoint.consumer).then(
        () => true,
        () => false,
      ),
    );
    const rotation = await rotator.rotate({ grant: "joiner/key" });
    expect(Object.keys(rotation.holders)).toEqual(["n1/app/first"]);
    const late = await hold("joiner", "late");
    const got = follow(late, gate(true));
    await waitUntil("the late one on generation 2", () => got.some((u) => u.generation === 2));
    expect(Object.keys((await rotationOf("joiner")).holders)).toEqual(["n1/app/first"]);
    firstMayConfirm.open();
    await waitUntil("the commit", () => committed("joiner"));
    await Promise.all([first.stop(), late.stop()]);
  }, 60_000);

  it("a holder's consumer that vanished mid-rotation counts as not confirmed, is made again, and its holder is delivered again; one that stops leaves no consumer", async () => {
    await applySecretModule("vanish");
    const mayConfirm = gate();
    const h = await hold("vanish", "v1");
    const got = follow(h, mayConfirm);
    await waitUntil("generation 1", () => got.some((u) => u.generation === 1));
    const e = holderEndpoint("vanish/key", "n1/app/v1")!;
    await waitUntil("its consumer made", async () => (await store.jsm.consumers.info(e.stream, e.consumer).catch(() => undefined)) !== undefined);
    await rotator.rotate({ grant: "vanish/key" });
    await waitUntil("generation 2 given", () => got.some((u) => u.generation === 2));
    // Lost with its server, say: deleted before the holder acknowledged.
    await store.jsm.consumers.delete(e.stream, e.consumer);
    mayConfirm.open();
    // The ack of the lost delivery goes nowhere; the rotator's sweep makes the consumer again, the broadcast comes again, and the holder (on generation 2 already) acknowledges it.
    await waitUntil("the commit", () => committed("vanish"), 30_000);
    expect(logs.lines.some((l) => l.includes("consumers had vanished; made again"))).toBe(true);
    await expectAcksInConsumers({ store }, await rotationOf("vanish"));
    await h.stop();
    await waitUntil(
      "its consumer removed with its registration",
      async () => (await store.jsm.consumers.info(e.stream, e.consumer).catch(() => undefined)) === undefined,
    );
  }, 60_000);

  it("a holder past its first 30 s on its consumer finds it lost mid-rotation as soon: the pull after a rotation is short", async () => {
    await applySecretModule("aged");
    const e = holderEndpoint("aged/key", "n1/app/a1")!;
    // The holder's pulls as the server gets them: their expiry, in ms.
    const pulls: number[] = [];
    const watch = nc.subscribe(`$JS.API.CONSUMER.MSG.NEXT.${e.stream}.${e.consumer}`, {
      callback: (_err, m) => {
        pulls.push(Number((m.json() as { expires?: number }).expires ?? 0) / 1_000_000);
      },
    });
    const mayConfirm = gate();
    const h = await hold("aged", "a1");
    const got = follow(h, mayConfirm);
    await waitUntil("generation 1", () => got.some((u) => u.generation === 1));
    // Past its first 30 s on the consumer, a holder pulls for 30 s at a time.
    await waitUntil("a 30 s pull", () => pulls.includes(30_000), 45_000);
    await rotator.rotate({ grant: "aged/key" });
    await waitUntil("generation 2 given", () => got.some((u) => u.generation === 2));
    const atMessage = pulls.length;
    // Lost before the holder acknowledged, and before its next pull: unconfirmed, that pull leaves a second after the message.
    await store.jsm.consumers.delete(e.stream, e.consumer);
    await waitUntil("the pull after the message", () => pulls.length > atMessage, 5_000);
    expect(pulls[atMessage]).toBe(2_000);
    mayConfirm.open();
    // Nothing answers a pull for a consumer that is not there: given up on after 3 s (a 30 s pull, after 31 s), the
    // consumer looked for until the rotator's sweep made it again, and the broadcast acknowledged on it.
    await waitUntil("the commit", () => committed("aged"), 20_000);
    await expectAcksInConsumers({ store }, await rotationOf("aged"));
    watch.unsubscribe();
    await h.stop();
  }, 90_000);
});
