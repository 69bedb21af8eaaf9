/**
 * Pulling a holder's consumer one message at a time on one inbox (packages/shared/src/one-pull.ts)
 * against a real nats-server: delivery and ack, the first pull after a message told apart, a
 * refusal delivered again with its count, the next pull held until the ack, a deleted consumer
 * and a pull nobody answers ending the run.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { jetstream, jetstreamManager, type JetStreamClient, type JetStreamManager } from "@nats-io/jetstream";
import { holderConsumerConfig, holderStreamConfig, type HolderEndpoint } from "@mesh/shared";
import { connectNats, OnePull, type NatsConnection, type PulledMessage } from "@mesh/shared/runtime";
import { startNatsServer, type NatsServer } from "./harness/nats-server.js";
import { waitFor } from "./harness/wait.js";

let nats: NatsServer;
let nc: NatsConnection;
let jsm: JetStreamManager;
let js: JetStreamClient;
const endpoint: HolderEndpoint = { stream: "MESH_HOLD_T_pull", consumer: "h1", subject: "pull.t.key", streamSubjects: "pull.t.>", sdk: true };

beforeAll(async () => {
  nats = await startNatsServer();
  nc = await connectNats(nats.url);
  jsm = await jetstreamManager(nc);
  js = jetstream(nc);
});

afterAll(async () => {
  await nc?.close();
  await nats?.stop();
});

async function freshConsumer(): Promise<void> {
  await jsm.streams.delete(endpoint.stream).catch(() => undefined);
  await jsm.streams.add(holderStreamConfig(endpoint, 1));
  await jsm.consumers.add(endpoint.stream, holderConsumerConfig(endpoint, 1));
}

const ackFloor = async () => (await jsm.consumers.info(endpoint.stream, endpoint.consumer)).ack_floor.stream_seq;

describe("OnePull", () => {
  it("delivers each message, its ack reaches the consumer, and the next pull leaves with it", async () => {
    await freshConsumer();
    const got: PulledMessage[] = [];
    const puller = new OnePull(nc, endpoint.stream, endpoint.consumer, (m) => got.push(m));
    const ended = puller.run(() => 30_000);
    const first = await js.publish(endpoint.subject, JSON.stringify({ n: 1 }));
    await waitFor("the first message", () => got.length === 1, 5_000);
    expect(got[0]!.json()).toEqual({ n: 1 });
    expect(got[0]!.deliveryCount).toBe(1);
    got[0]!.ack();
    await waitFor("the first ack in the ack floor", async () => (await ackFloor()) === first.seq, 5_000);
    // The pull that left with the ack delivers the next message.
    const second = await js.publish(endpoint.subject, JSON.stringify({ n: 2 }));
    await waitFor("the second message", () => got.length === 2, 5_000);
    got[1]!.ack();
    await waitFor("the second ack in the ack floor", async () => (await ackFloor()) === second.seq, 5_000);
    puller.close();
    expect(await ended).toBe("closed");
  });

  it("tells the expiry which pull is the first after a message", async () => {
    await freshConsumer();
    const got: PulledMessage[] = [];
    const asked: boolean[] = [];
    const puller = new OnePull(nc, endpoint.stream, endpoint.consumer, (m) => got.push(m));
    // Long before the message (none expires meanwhile), short after it (the test waits for its expiry).
    void puller.run((afterMessage) => {
      asked.push(afterMessage);
      return afterMessage ? 500 : 10_000;
    });
    await waitFor("the first pull", () => asked.length === 1, 5_000);
    await js.publish(endpoint.subject, "x");
    await waitFor("the message", () => got.length === 1, 5_000);
    got[0]!.ack();
    // The pull that leaves with the ack, then the one after its expiry.
    await waitFor("two more pulls", () => asked.length >= 3, 5_000);
    puller.close();
    expect(asked.slice(0, 3)).toEqual([false, true, false]);
  });

  it("delivers a refused message again, with its delivery count", async () => {
    await freshConsumer();
    const got: PulledMessage[] = [];
    const puller = new OnePull(nc, endpoint.stream, endpoint.consumer, (m) => (m.deliveryCount === 1 ? m.nak(100) : got.push(m)));
    void puller.run(() => 30_000);
    await js.publish(endpoint.subject, "x");
    await waitFor("the first message", () => got.length === 1, 5_000);
    expect(got[0]!.deliveryCount).toBe(2);
    puller.close();
  });

  it("pulls again after a message left unanswered, so a later one still arrives", async () => {
    await freshConsumer();
    const got: PulledMessage[] = [];
    const puller = new OnePull(nc, endpoint.stream, endpoint.consumer, (m) => got.push(m));
    void puller.run(() => 30_000);
    await js.publish(endpoint.subject, JSON.stringify({ n: 1 }));
    await waitFor("the first message", () => got.length === 1, 5_000);
    // Not answered: a newer message replaces it in the stream (one per subject kept), and is delivered.
    await js.publish(endpoint.subject, JSON.stringify({ n: 2 }));
    await waitFor("the newer message", () => got.some((m) => m.json<{ n: number }>().n === 2), 10_000);
    puller.close();
  });

  it("ends the run when the consumer is deleted", async () => {
    await freshConsumer();
    const puller = new OnePull(nc, endpoint.stream, endpoint.consumer, () => undefined);
    const ended = puller.run(() => 30_000);
    await new Promise((r) => setTimeout(r, 200));
    await jsm.consumers.delete(endpoint.stream, endpoint.consumer);
    expect(await ended).toBe("deleted");
    puller.close();
  });

  it("ends the run as lost when a pull is not answered by its expiry", async () => {
    await freshConsumer();
    // No consumer by that name: the server answers the pull with no status and no message.
    const puller = new OnePull(nc, endpoint.stream, "nobody", () => undefined);
    const t0 = Date.now();
    expect(await puller.run(() => 200)).toBe("lost");
    expect(Date.now() - t0).toBeGreaterThanOrEqual(200);
    puller.close();
  });
});
