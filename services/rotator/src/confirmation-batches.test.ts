/**
 * ConfirmationBatches with real NATS messages and a `record` that fails when told to: a request
 * is answered with a retryable error (its holder sends it again), a plain confirmation (the
 * SDK's, nobody to answer) is written again with a later batch, a few times at most; a batch
 * that holds what the rotation misses is written without waiting for the gathering timer; a
 * confirmation on another holder's subject is refused unwritten.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, type Msg, type NatsConnection } from "@nats-io/transport-node";
import { createLogger, subjects, type Confirmation } from "@mesh/shared";
import { ConfirmationBatches } from "./confirmation-batches.js";
import { startNatsServer, type NatsServer } from "../../../test/harness/nats-server.js";
import { LogCapture } from "../../../test/harness/log-capture.js";

let nats: NatsServer;
let nc: NatsConnection;
let holder: NatsConnection;

beforeAll(async () => {
  nats = await startNatsServer();
  nc = await connect({ servers: nats.url });
  holder = await connect({ servers: nats.url });
});

afterAll(async () => {
  await nc?.close();
  await holder?.close();
  await nats?.stop();
});

const confirmation = (i: number): Confirmation => ({ rotation: "cb/key#2", grant: "cb/key", holder: `n1/app/i${i}`, generation: 2, confirmedAt: new Date().toISOString() });

/** Batches over a `record` that throws while `failing()` says so, fed by a subscription on the confirmation subjects. */
function setUp(opts: { failing: () => boolean; missing?: number; gatherMs?: number }) {
  const written: Confirmation[][] = [];
  const logs = new LogCapture();
  const batches = new ConfirmationBatches({
    log: createLogger("test", { destination: logs }),
    record: async (_key, batch) => {
      if (opts.failing()) throw new Error("JetStream not available");
      written.push(batch);
      return { refused: [], done: false };
    },
    missing: () => opts.missing,
    onDone: () => undefined,
    holdIfPaused: async () => undefined,
    ...(opts.gatherMs !== undefined ? { gatherMs: opts.gatherMs } : {}),
  });
  const sub = nc.subscribe(subjects.rotationConfirmsAll, { callback: (_e, m: Msg) => batches.add(m) });
  return { batches, written, logs, stop: () => sub.unsubscribe() };
}

async function waitUntil(what: string, f: () => boolean, timeoutMs = 10_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!f()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe("ConfirmationBatches", () => {
  it("writes a plain confirmation again after a failed write, and answers a request's failure for its holder to send again", async () => {
    let failures = 2;
    const t = setUp({ failing: () => failures-- > 0 });
    await nc.flush();
    const subject = subjects.rotationConfirm("cb", "key", "n1", "app");
    holder.publish(subject, JSON.stringify(confirmation(1)));
    const answer = await holder.request(subject, JSON.stringify(confirmation(2)), { timeout: 5_000 });
    // The request's batch failed: its holder is told to send it again.
    expect(answer.json()).toMatchObject({ ok: false, error: { code: "Unavailable", retryable: true } });
    // The plain one is written once the record takes writes again, without being sent again.
    await waitUntil("the plain confirmation written", () => t.written.flat().some((c) => c.holder === "n1/app/i1"));
    expect(t.written.flat().filter((c) => c.holder === "n1/app/i1")).toHaveLength(1);
    expect(t.written.flat().some((c) => c.holder === "n1/app/i2")).toBe(false);
    t.stop();
    await t.batches.drain();
  });

  it("leaves a plain confirmation to its holder's next notice after a few failed writes", async () => {
    let writes = 0;
    const t = setUp({
      failing: () => {
        writes++;
        return true;
      },
    });
    await nc.flush();
    holder.publish(subjects.rotationConfirm("cb", "key", "n1", "app"), JSON.stringify(confirmation(3)));
    await waitUntil("five failed writes", () => writes >= 5);
    await t.batches.drain();
    await new Promise((r) => setTimeout(r, 500));
    expect(writes).toBe(5);
    expect(t.written).toEqual([]);
    t.stop();
  });

  it("refuses a confirmation sent on the subject of another part, or another grant, and writes neither", async () => {
    const t = setUp({ failing: () => false });
    await nc.flush();
    // n1/app/i7 confirming on the subject of part "worker": what a broker identity of another part would send.
    const wrongPart = await holder.request(subjects.rotationConfirm("cb", "key", "n1", "worker"), JSON.stringify(confirmation(7)), { timeout: 5_000 });
    expect(wrongPart.json()).toMatchObject({ ok: false, error: { code: "InvalidRequest", retryable: false } });
    expect((wrongPart.json() as { error: { message: string } }).error.message).toBe(
      "a confirmation of grant cb/key by n1/app/i7 belongs on mesh.api.confirm.cb.key.n1.app, not on mesh.api.confirm.cb.key.n1.worker",
    );
    const wrongGrant = await holder.request(subjects.rotationConfirm("other", "key", "n1", "app"), JSON.stringify(confirmation(8)), { timeout: 5_000 });
    expect(wrongGrant.json()).toMatchObject({ ok: false, error: { code: "InvalidRequest" } });
    const badHolder = await holder.request(subjects.rotationConfirm("cb", "key", "n1", "app"), JSON.stringify({ ...confirmation(9), holder: "n1.x/app" }), { timeout: 5_000 });
    expect((badHolder.json() as { error: { message: string } }).error.message).toContain("expected ids <module>/<requirement> and <node>/<part>[/<instance>]");
    await new Promise((r) => setTimeout(r, 100));
    expect(t.written).toEqual([]);
    t.stop();
  });

  it("writes a batch that holds every missing confirmation at once, without waiting to gather", async () => {
    const t = setUp({ failing: () => false, missing: 3, gatherMs: 60_000 });
    await nc.flush();
    for (const i of [4, 5, 6]) holder.publish(subjects.rotationConfirm("cb", "key", "n1", "app"), JSON.stringify(confirmation(i)));
    await waitUntil("the batch written", () => t.written.length > 0, 5_000);
    expect(t.written[0]!.map((c) => c.holder)).toEqual(["n1/app/i4", "n1/app/i5", "n1/app/i6"]);
    t.stop();
    await t.batches.drain();
  });
});
