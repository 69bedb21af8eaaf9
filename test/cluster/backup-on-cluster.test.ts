/**
 * `meshctl backup` of the mesh's store on a three-server cluster and `meshctl restore` onto
 * another, both without authentication: every stream comes back at three replicas with its
 * records at their revisions and the durables the services consume with.
 */
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AckPolicy } from "@nats-io/jetstream";
import { Buckets, Grant, keys, parseMasterKey } from "@mesh/shared";
import { connectNats, listConsumers, mutateJson, openStore, readJson, type NatsConnection } from "@mesh/shared/runtime";
import { ExitCodes, bufferOutput, runBackup, runRestore, stateDirsOf } from "../../packages/cli/src/index.js";
import { startPlainCluster, type PlainCluster } from "../harness/nats-cluster.js";
import { waitFor } from "../harness/wait.js";

let from: PlainCluster;
let to: PlainCluster;
let a: NatsConnection;
let b: NatsConnection;
let dir: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "mesh-cluster-backup-"));
  from = await startPlainCluster();
  to = await startPlainCluster();
  a = await connectNats(from.url, {});
  b = await connectNats(to.url, {});
}, 120_000);
afterAll(async () => {
  await Promise.all([a?.close(), b?.close()]);
  await Promise.all([from?.stop(), to?.stop()]);
  rmSync(dir, { recursive: true, force: true });
});

const grant = (requirement: string, generation: number): Grant =>
  Grant.parse({
    id: `shop/${requirement}`,
    module: "shop",
    requirement,
    kind: "secret",
    parts: ["api"],
    targets: [],
    provider: "builtin-secret",
    generation,
    conditions: [],
  });

describe("a backup of the mesh on a cluster", () => {
  it("restores onto another cluster at three replicas, with its records at their revisions and its durables", async () => {
    const store = await openStore(a);
    for (let g = 1; g <= 3; g++) await mutateJson(store.kv.grants, keys.grant("shop", "db"), Grant, () => grant("db", g));
    const before = (await readJson(store.kv.grants, keys.grant("shop", "db"), Grant))!;
    // A durable as a service's: acknowledged up to the second revision.
    await store.jsm.consumers.add(`KV_${Buckets.grants}`, { durable_name: "reader", ack_policy: AckPolicy.Explicit });
    const reader = await store.js.consumers.get(`KV_${Buckets.grants}`, "reader");
    // Each ack confirmed by the server (ackAck): a plain ack is on its way when info() reads the floor.
    for (let i = 0; i < 2; i++) await (await reader.next({ expires: 5_000 }))!.ackAck();
    const floor = (await reader.info()).ack_floor.stream_seq;
    expect(floor).toBeGreaterThan(0);
    const durables = [];
    for await (const c of store.jsm.consumers.list(`KV_${Buckets.grants}`)) durables.push(c.name);
    expect(durables.length).toBeGreaterThan(0);

    const key = parseMasterKey(randomBytes(32).toString("hex"));
    const masterKey = parseMasterKey(randomBytes(32).toString("hex"));
    const file = join(dir, "cluster.backup");
    expect(await runBackup(a, { file, key, masterKey, dirs: stateDirsOf(join(dir, "backed-up")), meshVersion: "test" }, bufferOutput())).toBe(ExitCodes.Ok);
    const masterKeyFile = join(dir, "master.key");
    expect(await runRestore(b, { file, key, masterKeyFile, dirs: stateDirsOf(join(dir, "restored")) }, bufferOutput())).toBe(ExitCodes.Ok);
    expect(readFileSync(masterKeyFile, "utf8").trim()).toBe(masterKey.key.toString("hex"));

    const restored = await openStore(b);
    const si = await restored.jsm.streams.info(`KV_${Buckets.grants}`);
    expect(si.config.num_replicas).toBe(3);
    expect(si.cluster?.replicas?.length).toBe(2);
    const after = (await readJson(restored.kv.grants, keys.grant("shop", "db"), Grant))!;
    expect(after).toEqual(before);
    // On a cluster a restored stream's consumers are placed after it: listed a moment later.
    const restoredDurables = await waitFor(
      "the restored stream's durables",
      async () => {
        const names: string[] = [];
        for await (const c of listConsumers(b, `KV_${Buckets.grants}`)) names.push(c.name);
        return names.length >= durables.length ? names : undefined;
      },
      30_000,
    );
    expect(restoredDurables.sort()).toEqual(durables.sort());
    expect((await restored.jsm.consumers.info(`KV_${Buckets.grants}`, "reader")).ack_floor.stream_seq).toBe(floor);
  });
});
