/**
 * The master key as a data key the mesh rotates (master-key-ring.ts): the credentials store is
 * written under generation k of grant `mesh/master-key` (wrapped by the local key-encryption
 * key), a rotation re-encrypts it under k+1 before it commits, and a holder fetching its
 * credential throughout never fails. Real nats-server, real services in this process.
 */
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ApplyReply, Rotation, createSealingKey, keys, parseMasterKey, subjects } from "@mesh/shared";
import { connectNats, fetchCredential, openStore, readJson, type NatsConnection, type Store } from "@mesh/shared/runtime";
import { createLogger } from "@mesh/shared/service";
import { CredentialRecord, CredentialStore, MasterKeyRing, storeKeyRing } from "@mesh/providers";
import { startResolver, type Resolver } from "@mesh/resolver";
import { startProvisioner, type Provisioner } from "@mesh/provisioner";
import { startAgent, type Agent } from "@mesh/agent";
import { startRotator, type Rotator } from "@mesh/rotator";
import { startNatsServer, type NatsServer } from "./harness/nats-server.js";
import { LogCapture } from "./harness/log-capture.js";
import { waitFor } from "./harness/wait.js";

/** The key id each record of the credentials bucket is encrypted under. */
async function keyIdsOfStore(store: Store): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for await (const k of await store.kv.credentials.keys()) {
    const e = await store.kv.credentials.get(k);
    if (e && e.operation === "PUT" && e.length > 0) out.set(k, CredentialRecord.parse(e.json()).encrypted.keyId);
  }
  return out;
}

describe("the master key: a data key of grant mesh/master-key, rotated with the store re-encrypted", () => {
  let nats: NatsServer;
  let nc: NatsConnection;
  let store: Store;
  let resolver: Resolver;
  let provisioner: Provisioner;
  let agent: Agent;
  let rotator: Rotator;
  let bindings: string;
  const logs = new LogCapture();
  const kek = parseMasterKey(randomBytes(32).toString("hex"));
  const log = (s: string) => createLogger(s, { destination: logs, level: "debug" });

  beforeAll(async () => {
    nats = await startNatsServer();
    nc = await connectNats(nats.url);
    store = await openStore(nc);
    bindings = mkdtempSync(join(tmpdir(), "mesh-mk-"));
    resolver = await startResolver({ store, log: log("resolver") });
    provisioner = await startProvisioner({ store, masterKey: storeKeyRing(store, kek), log: log("provisioner") });
    agent = await startAgent({ store, node: "node-a", bindingsRoot: join(bindings, "node-a"), log: log("agent") });
    rotator = await startRotator({ store, masterKey: storeKeyRing(store, kek), log: log("rotator"), sweepMs: 300 });
  }, 60_000);
  afterAll(async () => {
    await rotator?.stop();
    await agent?.stop();
    await provisioner?.stop();
    await resolver?.stop();
    await nc?.close();
    await nats?.stop();
    rmSync(bindings, { recursive: true, force: true });
  });

  const apply = async (documents: unknown[]) => ApplyReply.parse((await nc.request(subjects.apply, JSON.stringify({ documents }), { timeout: 10_000 })).json());
  const grantGeneration = async (module: string, requirement: string) =>
    ((await store.kv.grants.get(keys.grant(module, requirement)))?.json() as { generation?: number } | undefined)?.generation;

  it("writes the store under the data key, its own records under the KEK, and re-encrypts it at a rotation while a holder fetches throughout", async () => {
    const reply = await apply([
      {
        kind: "Module",
        name: "mesh",
        parts: ["provisioner", "verifier", "rotator"].map((name) => ({ name, node: "node-a", installed: true })),
        requires: [{ name: "master-key", kind: "secret", parts: ["provisioner", "verifier", "rotator"] }],
      },
    ]);
    expect(reply.ok, JSON.stringify(reply)).toBe(true);
    await waitFor("mesh/master-key generation 1", async () => (await store.kv.credentials.get(keys.credential("mesh", "master-key", 1))) ?? undefined, 20_000);
    const ring = new MasterKeyRing(kek, store.kv.credentials, store.kv.grants);
    await ring.refresh();
    expect(ring.generations()).toEqual([1]);
    const dek1 = await ring.sealing();
    expect(dek1.id).not.toBe(kek.id);

    // The app's grants, provisioned after the master key: under its data key.
    expect(
      (
        await apply([
          {
            kind: "Module",
            name: "app",
            parts: [{ name: "api", node: "node-a", installed: true }],
            requires: [{ name: "token", kind: "secret", parts: ["api"] }],
          },
        ])
      ).ok,
    ).toBe(true);
    await waitFor("app/token delivered", async () => ((await grantGeneration("app", "token")) === 1 ? true : undefined), 20_000);
    // Filler, so the pass takes a while: written as the services write, through the store's own code.
    const filler = new CredentialStore(store.kv.credentials, ring);
    for (let i = 0; i < 300; i++)
      await filler.ensure({ module: "load", requirement: `r${i}`, id: `load/r${i}` }, 1, "builtin-secret", () => ({ value: `v${i}` }));
    await waitFor("app/token's bindings recorded", async () => ((await filler.read("app", "token", 1))?.bindings ? true : undefined), 10_000);
    const before = await keyIdsOfStore(store);
    expect(before.get(keys.credential("mesh", "master-key", 1))).toBe(kek.id);
    expect(before.get(keys.credential("app", "token", 1))).toBe(dek1.id);
    expect([...before.entries()].filter(([k]) => !k.startsWith("mesh.")).every(([, id]) => id === dek1.id)).toBe(true);

    // A holder fetching its credential from the provisioner, as the agent does, throughout.
    const holderKey = createSealingKey();
    let fetches = 0;
    const failures: string[] = [];
    let stop = false;
    const holder = (async () => {
      while (!stop) {
        try {
          const got = await fetchCredential(nc, { grant: "app/token", generation: 1, node: "node-a", part: "api" }, holderKey, { timeoutMs: 3_000 });
          if (!got.values.value) failures.push("no value");
          fetches++;
        } catch (e) {
          failures.push(String(e));
        }
        // And every filler record, read by a reader of its own (as the verifier reads).
        try {
          const r = await new CredentialStore(store.kv.credentials, new MasterKeyRing(kek, store.kv.credentials, store.kv.grants)).read(
            "load",
            `r${fetches % 300}`,
            1,
          );
          if (r?.secret.value !== `v${fetches % 300}`) failures.push(`load/r${fetches % 300} read ${String(r?.secret.value)}`);
        } catch (e) {
          failures.push(String(e));
        }
      }
    })();

    const rot = (await nc.request(subjects.rotate, JSON.stringify({ grant: "mesh/master-key", timeoutMs: 30_000 }), { timeout: 15_000 })).json<{
      ok: boolean;
    }>();
    expect(rot.ok, JSON.stringify(rot)).toBe(true);
    await waitFor(
      "the master key's rotation to commit",
      async () => ((await readJson(store.kv.rotations, keys.grant("mesh", "master-key"), Rotation))?.value.state === "Committed" ? true : undefined),
      40_000,
    );
    stop = true;
    await holder;
    expect(failures).toEqual([]);
    expect(fetches).toBeGreaterThan(5);

    await ring.refresh();
    expect(ring.generations()).toEqual([1, 2]);
    const dek2 = await ring.sealing();
    const after = await keyIdsOfStore(store);
    expect(after.get(keys.credential("mesh", "master-key", 1))).toBe(kek.id);
    expect(after.get(keys.credential("mesh", "master-key", 2))).toBe(kek.id);
    const stale = [...after.entries()].filter(([k, id]) => !k.startsWith("mesh.master-key.") && id !== dek2.id);
    expect(stale).toEqual([]);
    expect(after.size).toBeGreaterThanOrEqual(302);
    // Values are what they were.
    expect((await filler.read("load", "r7", 1))?.secret.value).toBe("v7");
    expect(logs.text).toMatch(/the credentials store is under the master key's generation 2 \(\d+ records re-encrypted\)/);
    // A data key that still encrypts records is never erased; one nothing is under any more is.
    const erase = await filler.purgeGeneration("mesh", "master-key", 2).then(
      () => undefined,
      (e: unknown) => e as Error,
    );
    expect(erase?.message).toMatch(/mesh\.master-key\.g2 is the data key of \d+ credential records, so it is kept: rotate the master key/);
    expect(await store.kv.credentials.get(keys.credential("mesh", "master-key", 2))).toBeTruthy();
    await filler.purgeGeneration("mesh", "master-key", 1);
    expect((await store.kv.credentials.get(keys.credential("mesh", "master-key", 1)))?.operation).not.toBe("PUT");
    expect(
      (await new CredentialStore(store.kv.credentials, new MasterKeyRing(kek, store.kv.credentials, store.kv.grants)).read("load", "r9", 1))?.secret.value,
    ).toBe("v9");
    // A process with another master key file is told which file to give it, not handed garbage.
    const stranger = new CredentialStore(
      store.kv.credentials,
      new MasterKeyRing(parseMasterKey(randomBytes(32).toString("hex")), store.kv.credentials, store.kv.grants),
    );
    await expect(stranger.read("load", "r9", 1)).rejects.toThrow(
      /wrapped under key-encryption key .*, but this process has .*; give every provisioner, verifier and rotator the same MESH_MASTER_KEY_FILE/,
    );
  }, 120_000);
});
