/**
 * A node's agent on a three-server cluster holding more than one page of rotation consumers:
 * nats-server 2.9.10 in a cluster answers `$JS.API.CONSUMER.LIST` with a page's size as the
 * list's total, so a client that trusts it sees only the first 256 consumers of a stream. The
 * agent lists its node's holder stream to find the consumers made for it; one that saw a page
 * alone never consumed the rest, and the rotations of those grants stalled with every holder
 * unconfirmed (seen at 1,000 grants on one node, bench/growth.bench.ts on R3). Here: 300
 * consumers, each listed, and a rotation's message on the last one consumed and acknowledged.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { agentHolderStream, holderConsumerConfig, holderEndpoint, holderStreamConfig, type HolderEndpoint } from "@mesh/shared";
import { connectNats, listConsumers, openStore, type NatsConnection, type Store } from "@mesh/shared/runtime";
import { createLogger } from "@mesh/shared/service";
import { consumeRotations } from "../../services/agent/src/rotations.js";
import { startPlainCluster, type PlainCluster } from "../harness/nats-cluster.js";
import { waitFor } from "../harness/wait.js";

const NODE = "node-a";
/** More than the 256 consumers of one page. */
const N = 300;
const module = (i: number) => `m${String(i).padStart(3, "0")}`;
const endpointOf = (i: number): HolderEndpoint => holderEndpoint(`${module(i)}/key`, `${NODE}/api`)!;

let cluster: PlainCluster;
let nc: NatsConnection;
let store: Store;

beforeAll(async () => {
  cluster = await startPlainCluster();
  nc = await connectNats(cluster.url, { maxReconnectAttempts: -1 });
  store = await openStore(nc);
  await store.jsm.streams.add(holderStreamConfig(endpointOf(0), 3));
  let next = 0;
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      for (let i = next++; i < N; i = next++) await store.jsm.consumers.add(agentHolderStream(NODE), holderConsumerConfig(endpointOf(i), 3));
    }),
  );
}, 180_000);
afterAll(async () => {
  await nc?.close();
  await cluster?.stop();
});

describe("an agent holding more than a page of rotation consumers on a cluster", () => {
  it("lists every consumer of its holder stream, past the first page", async () => {
    const names: string[] = [];
    for await (const c of listConsumers(nc, agentHolderStream(NODE))) names.push(c.name);
    expect(names.length).toBe(N);
    expect(new Set(names)).toEqual(new Set(Array.from({ length: N }, (_, i) => endpointOf(i).consumer)));
  });

  it("consumes the rotation of a grant whose consumer is on the last page, and acknowledges it", async () => {
    const last = endpointOf(N - 1);
    const seen: string[] = [];
    const rotations = consumeRotations({
      store,
      node: NODE,
      log: createLogger("agent", { level: "silent" }),
      handle: (part) => async (m) => {
        seen.push(`${part} ${m.subject}`);
        return "ack";
      },
    });
    try {
      await store.js.publish(last.subject, JSON.stringify({ grant: `${module(N - 1)}/key`, to: 2 }));
      await waitFor("the last page's consumer to deliver its message to the agent", async () => seen.includes(`api ${last.subject}`), 60_000);
      await waitFor(
        "the agent's ack of it on the server",
        async () => (await store.jsm.consumers.info(agentHolderStream(NODE), last.consumer)).ack_floor.stream_seq > 0,
        30_000,
      );
    } finally {
      await rotations.stop();
    }
  });
});
