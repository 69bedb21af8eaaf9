/**
 * StoredPublisher against a real nats-server: resolves once a stream stored the message (with
 * JetStream's de-duplication by message id), rejects at once with a retryable `Unavailable`
 * when no stream takes the subject, and rejects what still waits when closed.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, headers, type NatsConnection } from "@nats-io/transport-node";
import { ErrorCodes, Streams, connectNats, isMeshError, openStore, subjects, type Store } from "@mesh/shared";
import { startNatsServer, type NatsServer } from "../../../test/harness/nats-server.js";
import { StoredPublisher } from "./stored-publisher.js";

let nats: NatsServer;
let store: Store;
let nc: NatsConnection;

beforeAll(async () => {
  nats = await startNatsServer();
  store = await openStore(await connectNats(nats.url));
  nc = await connect({ servers: nats.url });
});

afterAll(async () => {
  await nc?.close();
  await store?.nc.close();
  await nats?.stop();
});

describe("StoredPublisher", () => {
  it("resolves once the stream stored the message, and a repeat of its id is stored once", async () => {
    const p = new StoredPublisher(nc, 5_000);
    const subject = subjects.rotationConfirm("sp", "key");
    const before = (await store.jsm.streams.info(Streams.confirmations)).state.messages;
    await p.publish(subject, JSON.stringify({ n: 1 }), headers(), "sp-1");
    await p.publish(subject, JSON.stringify({ n: 1 }), headers(), "sp-1");
    await Promise.all([2, 3, 4].map((n) => p.publish(subject, JSON.stringify({ n }), headers(), `sp-${n}`)));
    expect((await store.jsm.streams.info(Streams.confirmations)).state.messages - before).toBe(4);
    const last = await store.jsm.streams.getMessage(Streams.confirmations, { last_by_subj: subject });
    expect(last?.json()).toEqual({ n: 4 });
    p.close();
  });

  it("rejects at once, retryable, when no stream takes the subject", async () => {
    const p = new StoredPublisher(nc, 5_000);
    const t0 = Date.now();
    const e = await p.publish("not.a.stream.subject", "{}", headers(), "x").catch((x: unknown) => x);
    expect(isMeshError(e) && e.code === ErrorCodes.Unavailable && e.retryable).toBe(true);
    expect(Date.now() - t0).toBeLessThan(2_000);
    p.close();
  });

  it("rejects what still waits when closed", async () => {
    const p = new StoredPublisher(nc, 5_000);
    // A subject only a plain subscriber hears: no acknowledgement ever comes.
    const sub = nc.subscribe("sp.silent", { callback: () => undefined });
    await nc.flush();
    const waiting = p.publish("sp.silent", "{}", headers(), "y").catch((x: unknown) => x);
    p.close();
    const e = await waiting;
    expect(isMeshError(e) && e.code === ErrorCodes.Unavailable).toBe(true);
    sub.unsubscribe();
  });
});
