/**
 * The mesh's store on a three-server cluster, without the services: buckets and streams are
 * made at R3 when the server says it is in a cluster of three, and compare-and-set writes of
 * one key from two processes at once lose nothing, although nats-server 2.9.10 lets two
 * updates based on the same revision through on a cluster (kv-records.ts, casUpdate).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { mutateJson, openStore, readJson, storeReplicas, type NatsConnection, type Store } from "@mesh/shared";
import { startOperatorCluster, type OperatorCluster } from "../harness/nats-cluster.js";
import { waitFor } from "../harness/wait.js";

const Ids = z.object({ ids: z.array(z.string()) });

describe("the store on a three-server cluster", () => {
  let cluster: OperatorCluster;
  const conns: NatsConnection[] = [];
  let stores: Store[];

  beforeAll(async () => {
    cluster = await startOperatorCluster();
    for (let i = 0; i < 2; i++) conns.push(await cluster.connect(undefined, { name: `writer-${i}` }));
    stores = [];
    for (const nc of conns) stores.push(await openStore(nc));
  }, 120_000);
  afterAll(async () => {
    for (const nc of conns) await nc.close().catch(() => {});
    await cluster?.stop();
  });

  it("is made at R3: the server names its cluster and three members", async () => {
    expect(storeReplicas(conns[0]!.info, {})).toBe(3);
    expect(storeReplicas(conns[0]!.info, { MESH_REPLICAS: "1" })).toBe(1);
    const si = await stores[0]!.jsm.streams.info("KV_mesh-grants");
    expect(si.config.num_replicas).toBe(3);
  });

  it("loses no compare-and-set write of one key made from two processes at once", async () => {
    // Ten at once from each: on 2.9.10 this stores several updates based on one revision
    // (seen here: up to twelve siblings), each overwriting the one before.
    const key = "race.key";
    const writes = stores.flatMap((store, w) =>
      Array.from({ length: 10 }, (_, i) => `w${w}-${i}`).map((id) => mutateJson(store.kv.grants, key, Ids, (cur) => (cur?.ids.includes(id) ? undefined : { ids: [...(cur?.ids ?? []), id] }), { attempts: 200 })),
    );
    await Promise.all(writes);
    const all = await waitFor(
      "every write in the record",
      async () => {
        const r = await readJson(stores[0]!.kv.grants, key, Ids);
        return r && r.value.ids.length === 20 ? r.value.ids : undefined;
      },
      15_000,
      100,
    );
    expect(new Set(all).size).toBe(20);
    // Not one update was stored on top of a revision another update had already taken: each
    // message of the key names, as the revision it expected, the message before it.
    const stream = "KV_mesh-grants";
    const subject = `$KV.mesh-grants.${key}`;
    let prev = 0;
    for (let seq = 0; ; ) {
      const m = await stores[0]!.jsm.direct.getMessage(stream, { seq: seq + 1, next_by_subj: subject }).catch(() => null);
      if (!m) break;
      const expected = m.header?.get("Nats-Expected-Last-Subject-Sequence");
      if (prev > 0) expect(expected, `message ${m.seq} of ${key}`).toBe(String(prev));
      prev = seq = m.seq;
    }
    expect((await stores[0]!.jsm.streams.info(stream)).config.duplicate_window).toBeGreaterThan(0);
  });
});
