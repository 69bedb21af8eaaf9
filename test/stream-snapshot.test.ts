/**
 * JetStream's snapshot and restore API, as the mesh speaks it (stream-snapshot.ts), between two
 * nats-servers of the test's own: the restored stream has every message at its sequence, and
 * its durable consumer where it was (what it delivered, what was acknowledged).
 */
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AckPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { restoreStream, snapshotStream } from "@mesh/shared/runtime";
import { startNatsServer, type NatsServer } from "./harness/nats-server.js";

let from: NatsServer;
let to: NatsServer;
let a: NatsConnection;
let b: NatsConnection;

beforeAll(async () => {
  [from, to] = await Promise.all([startNatsServer(), startNatsServer()]);
  [a, b] = await Promise.all([connect({ servers: from.url }), connect({ servers: to.url })]);
});
afterAll(async () => {
  await Promise.all([a?.close(), b?.close()]);
  await Promise.all([from?.stop(), to?.stop()]);
});

describe("a stream's snapshot", () => {
  it("restores on another server with its messages at their sequences and its consumer's floors", async () => {
    const kv = await new Kvm(a).create("snap-test", { history: 3 });
    // More than one chunk of the archive, compressed: 300 random values of 2 KiB, in 100 keys of 3 revisions.
    for (let i = 0; i < 300; i++) await kv.put(`k${i % 100}`, randomBytes(1024).toString("hex"));
    const jsm = await jetstreamManager(a);
    await jsm.consumers.add("KV_snap-test", { durable_name: "reader", ack_policy: AckPolicy.Explicit, filter_subject: "$KV.snap-test.>" });
    const c = await jetstream(a).consumers.get("KV_snap-test", "reader");
    // Ten acknowledged, and one delivered but not acknowledged.
    for (let i = 0; i < 10; i++) await (await c.next({ expires: 2_000 }))!.ackAck();
    expect(await c.next({ expires: 2_000 })).not.toBeNull();
    const before = await c.info();

    let received = 0;
    const snap = await snapshotStream(a, "KV_snap-test", (n) => (received = n));
    expect(snap.config.name).toBe("KV_snap-test");
    expect(snap.data.length).toBeGreaterThan(128 * 1024);
    expect(received).toBe(snap.data.length);

    const info = await restoreStream(b, snap);
    expect(info.state.messages).toBe(300);
    expect(info.state.last_seq).toBe(300);
    const restored = await new Kvm(b).open("snap-test");
    expect((await restored.get("k7"))?.string()).toBe((await kv.get("k7"))?.string());
    expect((await restored.get("k7"))?.revision).toBe((await kv.get("k7"))?.revision);
    const ci = await (await jetstreamManager(b)).consumers.info("KV_snap-test", "reader");
    expect(ci.ack_floor.stream_seq).toBe(before.ack_floor.stream_seq);
    expect(ci.delivered.stream_seq).toBe(before.delivered.stream_seq);

    // A stream of that name on the server already: the server refuses, said as the server says it.
    await expect(restoreStream(b, snap)).rejects.toThrow(/already in use/);
  });

  it("of a stream the server does not have is the server's error", async () => {
    await expect(snapshotStream(a, "NO_SUCH_STREAM")).rejects.toThrow(/not found/);
  });
});
