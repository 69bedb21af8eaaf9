/**
 * The master key's rotation with the real process tree of `meshctl bootstrap`: a holder (with
 * the node agent's own identity) fetches its credential from the provisioner throughout; the
 * rotator is SIGKILLed in the middle of re-encrypting the store, every record still opens,
 * and the restarted rotator finishes the pass and commits; then the whole mesh stops and
 * starts cold from its directory (the KEK file and NATS's store alone) and reads it all.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, credsAuthenticator, type NatsConnection } from "@nats-io/transport-node";
import { ModuleStatus, Rotation, createSealingKey, keys, parseMasterKey } from "@mesh/shared";
import { fetchCredential, natsIdentity, openStore, readJson, type Store } from "@mesh/shared/runtime";
import { CredentialRecord, CredentialStore, MasterKeyRing } from "@mesh/providers";
import { startBootstrappedMesh, type BootstrappedMesh } from "./harness/bootstrapped-mesh.js";
import { waitFor } from "./harness/wait.js";

const FILLER = 2_000;

describe("the master key's rotation across real processes: SIGKILL mid re-encryption, then a cold start", () => {
  let mesh: BootstrappedMesh | undefined;
  let admin: NatsConnection | undefined;
  beforeAll(async () => {
    mesh = await startBootstrappedMesh();
  }, 180_000);
  afterAll(async () => {
    await admin?.close().catch(() => undefined);
    await mesh?.stop();
  });

  const connectAdmin = async (m: BootstrappedMesh) => {
    admin = await connect({ servers: m.url, authenticator: credsAuthenticator(readFileSync(m.adminCredsFile)), ...m.tls() });
    return openStore(admin);
  };
  const keyIdOf = async (store: Store, k: string) => {
    const e = await store.kv.credentials.get(k);
    return e && e.operation === "PUT" && e.length > 0 ? CredentialRecord.parse(e.json()).encrypted.keyId : undefined;
  };
  /** Every record's key id, and whether a reader with a fresh ring opens it. */
  const scan = async (store: Store, kek: ReturnType<typeof parseMasterKey>) => {
    const reader = new CredentialStore(store.kv.credentials, new MasterKeyRing(kek, store.kv.credentials, store.kv.grants));
    const ids = new Map<string, number>();
    const unreadable: string[] = [];
    for await (const k of await store.kv.credentials.keys()) {
      const id = await keyIdOf(store, k);
      if (!id) continue;
      ids.set(id, (ids.get(id) ?? 0) + 1);
      const m = /^(.+)\.(.+)\.g(\d+)$/.exec(k)!;
      if (
        !(await reader.read(m[1]!, m[2]!, Number(m[3])).then(
          (r) => r !== undefined,
          () => false,
        ))
      )
        unreadable.push(k);
    }
    return { ids, unreadable };
  };

  it("a holder never fails; a rotator killed mid-pass leaves every record readable, and the next one finishes; a cold start reads the store", async () => {
    const m = mesh!;
    const store = await connectAdmin(m);
    const kek = parseMasterKey(readFileSync(join(m.cwd, ".mesh/master.key"), "utf8"));
    const ring = new MasterKeyRing(kek, store.kv.credentials, store.kv.grants);
    await waitFor("mesh/master-key generation 1", async () => (await ring.refresh(), ring.generations().includes(1) || undefined), 30_000);
    const dek1 = await ring.sealing();

    const manifest = join(m.cwd, "app.yaml");
    writeFileSync(
      manifest,
      "kind: Module\nname: app\nparts: [{ name: api, node: node-a, installed: true }]\nrequires: [{ name: token, kind: secret, parts: [api] }]\n",
    );
    const applied = await m.meshctl(["apply", "-f", manifest, "--wait", "--timeout", "60s"]);
    expect(applied.code, applied.stderr + applied.stdout).toBe(0);
    const tokenFile = join(m.cwd, ".mesh/bindings/node-a/app/api/token/value");
    const token = await waitFor(
      "the agent to write app/token",
      () => {
        try {
          return readFileSync(tokenFile, "utf8");
        } catch {
          return undefined;
        }
      },
      30_000,
    );
    expect(await keyIdOf(store, keys.credential("app", "token", 1))).toBe(dek1.id);

    const filler = new CredentialStore(store.kv.credentials, ring);
    for (let i = 0; i < FILLER; i++)
      await filler.ensure({ module: "load", requirement: `r${i}`, id: `load/r${i}` }, 1, "builtin-secret", () => ({ value: `v${i}` }));

    // The holder: the agent's own identity, fetching as the agent does.
    const asAgent = (cwd: string) => natsIdentity({ MESH_NATS_CREDENTIALS: join(cwd, ".mesh/bindings/node-a/mesh/agent-node-a/nats-agent-node-a") });
    const holderNc = await connect({ servers: m.url, ...asAgent(m.cwd), ...m.tls() });
    const holderKey = createSealingKey();
    const failures: string[] = [];
    let fetches = 0;
    let stop = false;
    const holder = (async () => {
      while (!stop) {
        try {
          const got = await fetchCredential(holderNc, { grant: "app/token", generation: 1, node: "node-a", part: "api" }, holderKey, { timeoutMs: 3_000 });
          if (got.values.value !== token) failures.push("another value");
          fetches++;
        } catch (e) {
          failures.push(String(e));
        }
        await new Promise((r) => setTimeout(r, 20));
      }
    })();

    const rotatorPid = m.servicePid("rotator")!;
    expect(rotatorPid).toBeGreaterThan(0);
    const rotate = await m.meshctl(["rotate", "mesh/master-key", "--timeout", "60s"]);
    expect(rotate.code, rotate.stderr + rotate.stdout).toBe(0);
    await waitFor("generation 2 staged", async () => (await ring.refresh(), ring.generations().includes(2) || undefined), 30_000);
    const dek2 = await ring.sealing();
    // The pass goes in key order of the stream: the first filler record moves long before the last.
    await waitFor(
      "the re-encryption pass to be under way",
      async () =>
        (await keyIdOf(store, keys.credential("load", "r0", 1))) === dek2.id &&
        (await keyIdOf(store, keys.credential("load", `r${FILLER - 1}`, 1))) === dek1.id,
      60_000,
      5,
    );
    process.kill(rotatorPid, "SIGKILL");
    const mid = await scan(store, kek);
    expect(mid.unreadable).toEqual([]);
    expect(mid.ids.get(dek1.id) ?? 0, "records left under k by the killed pass").toBeGreaterThan(0);
    expect(mid.ids.get(dek2.id) ?? 0, "records the killed pass moved").toBeGreaterThan(0);

    // meshctl starts the rotator again; it resumes the commit step, the pass first.
    await waitFor(
      "the rotation to commit",
      async () => ((await readJson(store.kv.rotations, keys.grant("mesh", "master-key"), Rotation))?.value.state === "Committed" ? true : undefined),
      90_000,
      250,
    );
    expect(m.servicePid("rotator")).not.toBe(rotatorPid);
    stop = true;
    await holder;
    await holderNc.close();
    expect(failures).toEqual([]);
    expect(fetches).toBeGreaterThan(10);
    const done = await scan(store, kek);
    expect(done.unreadable).toEqual([]);
    // Under k+1 all but the data keys' own records (under the KEK).
    expect(done.ids.get(dek1.id) ?? 0).toBe(0);
    expect(done.ids.get(dek2.id)).toBeGreaterThanOrEqual(FILLER + 1);
    expect(readFileSync(join(m.cwd, ".mesh/logs/rotator.log"), "utf8")).toMatch(/the credentials store is under the master key's generation 2/);

    // A full restart: everything stops; bootstrap starts from the directory alone.
    await admin!.close();
    admin = undefined;
    await m.stop({ keep: true });
    mesh = await startBootstrappedMesh({ restart: m });
    const again = await connectAdmin(mesh);
    const after = await scan(again, kek);
    expect(after.unreadable).toEqual([]);
    const holder2 = await connect({ servers: mesh.url, ...asAgent(mesh.cwd), ...mesh.tls() });
    try {
      const got = await waitFor(
        "the provisioner to answer after the cold start",
        () =>
          fetchCredential(holder2, { grant: "app/token", generation: 1, node: "node-a", part: "api" }, holderKey, { timeoutMs: 3_000 }).catch(() => undefined),
        60_000,
        250,
      );
      expect(got.values.value).toBe(token);
    } finally {
      await holder2.close();
    }
    const app = (await readJson(again.kv.modules, "app", ModuleStatus))?.value;
    expect(app?.state).toBe("Ready");
    for (const s of ["provisioner", "verifier", "rotator"])
      expect(readFileSync(join(mesh.cwd, `.mesh/logs/${s}.log`), "utf8"), s).not.toMatch(
        /does not decrypt|was encrypted under master key|is encrypted under key/,
      );
  }, 400_000);
});
