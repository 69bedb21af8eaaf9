/**
 * The mesh's store on a three-server cluster, without the services: buckets and streams are
 * made at R3 when the server says it is in a cluster of three, and compare-and-set writes of
 * one key from two connections at once lose nothing, although nats-server 2.9.10 lets two
 * updates based on the same revision through on a cluster (kv-records.ts, casUpdate): neither
 * the mesh's JSON records, nor the credential store's records, nor the nats.user provider's
 * record of what it issued and revoked.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { Kvm } from "@nats-io/kv";
import { mutateJson, openStore, readJson, storeReplicas, type JetStreamManager, type NatsConnection, type Store } from "@mesh/shared/runtime";
import { CredentialStore, NATS_IDENTITY_RECORDS_BUCKET, type ProviderAdapter, type ProviderConfig } from "@mesh/providers";
import { createNatsUserAdapter } from "../../packages/providers/src/nats-user.js";
import { freshGrant } from "../conformance/provider-conformance.js";
import { startOperatorCluster, type OperatorCluster } from "../harness/nats-cluster.js";
import { waitFor } from "../harness/wait.js";

const Ids = z.object({ ids: z.array(z.string()) });

/**
 * The updates of `key` in `stream` stored on top of a revision another update had already
 * taken: each message of a key must name, as the revision it expected, the message before it.
 * What a lost update leaves behind, whatever the writers meant to write.
 */
async function updatesOverTakenRevisions(jsm: JetStreamManager, stream: string, subject: string): Promise<number[]> {
  const bad: number[] = [];
  let prev = 0;
  for (let seq = 0; ;) {
    const m = await jsm.direct.getMessage(stream, { seq: seq + 1, next_by_subj: subject }).catch(() => null);
    if (!m) break;
    const expected = m.header?.get("Nats-Expected-Last-Subject-Sequence");
    if (prev > 0 && expected !== String(prev)) bad.push(m.seq);
    prev = seq = m.seq;
  }
  return bad;
}

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
      Array.from({ length: 10 }, (_, i) => `w${w}-${i}`).map((id) =>
        mutateJson(store.kv.grants, key, Ids, (cur) => (cur?.ids.includes(id) ? undefined : { ids: [...(cur?.ids ?? []), id] }), { attempts: 200 }),
      ),
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
    expect(await updatesOverTakenRevisions(stores[0]!.jsm, "KV_mesh-grants", `$KV.mesh-grants.${key}`)).toEqual([]);
    expect((await stores[0]!.jsm.streams.info("KV_mesh-grants")).config.duplicate_window).toBeGreaterThan(0);
  });

  it("loses no write of a credential record by two credential stores at once", async () => {
    // Each store records the bindings of one generation twenty times over, each time other
    // values: every write seals the record again and writes it by compare-and-set. Store a's
    // start from the record as it stored it (no read), stale after the first write lands: each
    // such write must fail its compare-and-set and read the record again, never write over it.
    const [a, b] = stores.map((st) => new CredentialStore(st.kv.credentials, cluster.masterKey));
    const grant = { module: "race", requirement: "db", id: "race/db" };
    const over = await a!.ensureStored(grant, 1, "pg", () => ({ value: "secret-1" }));
    expect(over.bindings).toBeUndefined();
    // Store b reads from its own server, whose replica may not have applied a's write yet (a
    // direct get; read-floors.ts): a process writes a record only after it has heard of it, so b
    // first sees what a wrote, and then the two race.
    await waitFor("store b to read generation 1", async () => (await b!.read("race", "db", 1)) ?? undefined, 10_000);
    const writes = [a!, b!].flatMap((cs, w) =>
      Array.from({ length: 20 }, (_, i) => cs.setBindings("race", "db", 1, { password: "secret-1", note: `w${w}-${i}` }, w === 0 ? over : undefined)),
    );
    await Promise.all(writes);
    const stored = await a!.read("race", "db", 1);
    expect(stored?.secret.value).toBe("secret-1");
    expect(stored?.bindings?.note).toMatch(/^w[01]-\d+$/);
    expect(await updatesOverTakenRevisions(stores[0]!.jsm, "KV_mesh-credentials", "$KV.mesh-credentials.race.db.g1")).toEqual([]);
  });

  it("loses no write of the nats.user provider's record of an identity by two adapters at once, nor its revocation", async () => {
    // Two adapters issue one identity again and again with other permissions (each time a new
    // JWT written into the record) while one of them retires it. Whichever writes second reads
    // the first's record: the record ends revoked, and a re-issue after the retirement is
    // refused. A lost update could leave the record as a re-issue wrote it: an identity the
    // provider says is retired but never pushed as revoked.
    const provider = (): ProviderConfig => ({
      name: "nats-cluster",
      node: "node-a",
      endpoint: cluster.url,
      admin: { username: "mesh-admin", password: cluster.adminCreds },
      options: { signingKeysFile: cluster.files.signingKeysFile },
      masterKey: cluster.masterKey,
    });
    const adapters: ProviderAdapter[] = [createNatsUserAdapter(provider()), createNatsUserAdapter(provider())];
    try {
      const grants = Array.from({ length: 5 }, () => freshGrant());
      const secrets = grants.map(() => adapters[0]!.generate());
      const issue = (i: number, k: number) =>
        adapters[k % 2]!.create({ grant: grants[i]!, secret: secrets[i]!, options: { publish: [`app.${grants[i]!.module}.p${k % 3}`] } });
      await Promise.all(grants.map((_, i) => issue(i, 0)));
      const outcomes = await Promise.all(
        grants.map((grant, i) =>
          Promise.allSettled([
            ...Array.from({ length: 6 }, (_, k) => issue(i, k + 1)),
            adapters[1]!.retire({ grant }),
            ...Array.from({ length: 6 }, (_, k) => issue(i, k + 7)),
          ]),
        ),
      );
      for (const settled of outcomes) {
        expect(settled[6]!.status, "the retirement").toBe("fulfilled");
        for (const s of settled) if (s.status === "rejected") expect(String(s.reason)).toMatch(/revoked at/);
      }
      const kv = await new Kvm(stores[0]!.nc).open(NATS_IDENTITY_RECORDS_BUCKET);
      const stream = `KV_${NATS_IDENTITY_RECORDS_BUCKET}`;
      for (const g of grants) {
        const key = `${g.module}.${g.requirement}.${g.generation}`;
        const e = await kv.get(key);
        expect(e?.json<{ revokedAt?: number }>().revokedAt, `${key} revoked`).toBeTypeOf("number");
        expect(await updatesOverTakenRevisions(stores[0]!.jsm, stream, `$KV.${NATS_IDENTITY_RECORDS_BUCKET}.${key}`)).toEqual([]);
      }
    } finally {
      for (const a of adapters) await a.close();
    }
  });
});
