/**
 * The self-hosting transition: a requirement satisfied by a provider moves to a provider
 * installed later that is preferred. The resolver re-resolves, the new resource is made, every
 * holder moves over through the rotation fan-out (node agents, and an SDK holder that confirms
 * only when the test lets it), and only once all confirmed does the old credential stop working
 * on the old provider; the old resource is kept with its data (the mesh moves no data).
 * And `meshctl delete provider NAME --force` while it still serves the grant: the grant is
 * re-resolved to the other provider of its kind, by the same handover, and its holder moves
 * without a failed login. Two Redis servers of the test's own play the two providers.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { connect } from "@nats-io/transport-node";
import { Redis } from "ioredis";
import { DeleteReply, Kinds, Rotation, getCondition, keys, readHolderAcks, subjects, type ModuleDoc, type ProviderDoc } from "@mesh/shared";
import { readJson, type NatsConnection } from "@mesh/shared/runtime";
import { createLogger } from "@mesh/shared/service";
import { createAdapter, type BindingValues, type ProviderAdapter } from "@mesh/providers";
import { holdCredential, type HeldCredential } from "@mesh/client";
import { startRotator } from "@mesh/rotator";
import { startTestMesh, type TestMesh } from "./mesh.js";
import { startOwnRedis, type OwnRedis } from "./harness/redis.js";
import { waitFor } from "./harness/wait.js";

/**
 * A mesh (agents on `nodes`) with a rotator, and two Redis servers of the test's own, whose admin
 * passwords the providers read from BOOT_REDIS_PASSWORD and LATER_REDIS_PASSWORD; `login` logs
 * in as a holder would, with no admin credential.
 */
async function twoRedisWorld(nodes: string[]) {
  const [boot, later] = await Promise.all([startOwnRedis(), startOwnRedis()]);
  const env = { ...process.env, BOOT_REDIS_PASSWORD: boot.adminPassword, LATER_REDIS_PASSWORD: later.adminPassword };
  const mesh = await startTestMesh({ nodes, env });
  const rotator = await startRotator({
    store: mesh.store,
    masterKey: mesh.masterKey,
    env,
    log: createLogger("rotator", { destination: mesh.logs, level: "debug" }),
    sweepMs: 500,
  });
  const login = createAdapter(Kinds.RedisUser, { name: "check", node: "node-a", endpoint: boot.endpoint });
  return {
    mesh,
    rotator,
    boot,
    later,
    login,
    async stop() {
      await login.close();
      await rotator.stop();
      await mesh.stop();
      await Promise.all([boot.stop(), later.stop()]);
    },
  };
}

/** Provider `name` of redis.user at `r`, its admin's password in `passwordEnv`. */
const provider = (name: string, r: OwnRedis, passwordEnv: string, preference?: number): ProviderDoc => ({
  kind: "Provider",
  name,
  serves: [Kinds.RedisUser],
  node: "node-a",
  endpoint: r.endpoint,
  admin: { username: r.adminUser, passwordEnv },
  installed: true,
  ...(preference ? { preference } : {}),
});

describe("handing a grant over to a preferred provider", () => {
  let world: Awaited<ReturnType<typeof twoRedisWorld>>;
  let mesh: TestMesh;
  let boot: OwnRedis;
  let later: OwnRedis;
  let sdk: NatsConnection;
  let login: ProviderAdapter;

  beforeAll(async () => {
    world = await twoRedisWorld(["node-a", "node-b"]);
    ({ mesh, boot, later, login } = world);
  }, 60_000);
  afterAll(async () => {
    await sdk?.close();
    await world?.stop();
  });

  const logsIn = async (bindings: BindingValues) => (await login.login({ bindings })).ok;

  it("moves every holder to the new provider; the old credential works until all confirmed, and its resource is kept", async () => {
    const app = {
      kind: "Module",
      name: "app",
      parts: [
        { name: "api", node: "node-a" },
        { name: "worker", node: "node-b" },
        { name: "web", node: "node-a" },
      ],
      requires: [{ name: "cache", kind: "redis.user" }],
    };
    expect((await mesh.apply([provider("boot-redis", boot, "BOOT_REDIS_PASSWORD"), app])).ok).toBe(true);
    await waitFor("generation 1 provisioned", async () => ((await mesh.grant("app", "cache"))?.generation ?? 0) >= 1);

    // Part web is also held by an SDK instance (the application's own process), which confirms only when the test says so.
    sdk = await connect({ servers: mesh.nats.url });
    const held = await holdCredential(sdk, { module: "app", part: "web", requirement: "cache", node: "node-a", instance: "i1" });
    const updates: HeldCredential[] = [];
    let confirmNow!: () => void;
    const mayConfirm = new Promise<void>((r) => (confirmNow = r));
    void (async () => {
      for await (const u of held) {
        updates.push(u);
        if (u.rotation) {
          await mayConfirm;
          await u.confirm();
        }
      }
    })();
    await waitFor("the SDK holder on generation 1", () => updates.some((u) => u.generation === 1));
    await mesh.waitForState("app", "Ready");
    const binding = (node: string, part: string): BindingValues => {
      const dir = join(mesh.bindingsRoot, node, "app", part, "cache");
      return Object.fromEntries(["host", "port", "username", "password"].map((k) => [k, readFileSync(join(dir, k), "utf8")]));
    };
    const g1 = binding("node-a", "api");
    expect(g1.port).toBe(String(boot.port));
    expect(await logsIn(g1)).toBe(true);
    const holder = new Redis({ host: "127.0.0.1", port: boot.port, username: g1.username, password: g1.password, lazyConnect: true, enableReadyCheck: false });
    await holder.connect();
    await holder.set("app:kept", "before the handover");
    holder.disconnect();

    // The store installed later, preferred; it holds a user of the grant's name the mesh did not
    // make, so the handover cannot start there, and says so on the grant until that is gone.
    const laterAdmin = new Redis({ host: "127.0.0.1", port: later.port, username: later.adminUser, password: later.adminPassword, lazyConnect: true });
    await laterAdmin.connect();
    await laterAdmin.call("ACL", "SETUSER", g1.username!, "on", ">theirs", "~other:*");
    expect((await mesh.apply([provider("later-redis", later, "LATER_REDIS_PASSWORD", 10)])).ok).toBe(true);
    const blocked = await waitFor("the handover blocked, and said on the grant", async () => {
      const c = (await mesh.grant("app", "cache"))?.conditions.find((x) => x.type === "Rotating");
      return c?.reason === "HandoverBlocked" ? c : undefined;
    });
    expect(blocked).toMatchObject({ status: "False" });
    expect(blocked.message).toContain("from boot-redis to later-redis");
    expect(blocked.message).toContain(g1.username!);
    expect((await mesh.waitForState("app", "Degraded")).message).toContain("HandoverBlocked");
    expect(await logsIn(g1)).toBe(true);
    await laterAdmin.call("ACL", "DELUSER", g1.username!);
    laterAdmin.disconnect();
    const key = keys.grant("app", "cache");
    const waiting = await waitFor(
      "a handover waiting for the SDK holder",
      async () => {
        const r = (await readJson(mesh.store.kv.rotations, key, Rotation))?.value;
        if (r?.trigger !== "handover") return undefined;
        // Who confirmed is JetStream's: each holder's consumer has acknowledged the broadcast.
        const states = await readHolderAcks(mesh.store.jsm, r);
        const acked = new Set(states.filter((h) => h.acked).map((h) => h.holder));
        return ["node-a/api", "node-a/web", "node-b/worker"].every((h) => acked.has(h)) && !acked.has("node-a/web/i1") ? r : undefined;
      },
      30_000,
    );
    expect(waiting).toMatchObject({ fromProvider: "boot-redis", provider: "later-redis", from: 1, to: 2 });
    expect(waiting.state).not.toBe("Committed");
    // The agents' holders are on the new provider; the SDK holder still uses the old credential, which still works.
    const g2 = binding("node-b", "worker");
    expect(g2.port).toBe(String(later.port));
    expect(await logsIn(g2)).toBe(true);
    expect(binding("node-a", "api").port).toBe(String(later.port));
    expect(updates.at(-1)).toMatchObject({ generation: 2, values: { port: String(later.port) } });
    expect(await logsIn(g1)).toBe(true);

    confirmNow();
    const committed = await waitFor(
      "the handover to commit",
      async () => {
        const r = (await readJson(mesh.store.kv.rotations, key, Rotation))?.value;
        return r?.state === "Committed" ? r : undefined;
      },
      30_000,
    );
    expect(Object.keys(committed.holders).sort()).toEqual(["node-a/api", "node-a/web", "node-a/web/i1", "node-b/worker"]);
    expect(await logsIn(g1)).toBe(false);
    expect(await logsIn(g2)).toBe(true);
    // Kept on the old server: the user (without the old password) and the data under its prefix.
    const admin = new Redis({ host: "127.0.0.1", port: boot.port, username: boot.adminUser, password: boot.adminPassword, lazyConnect: true });
    try {
      await admin.connect();
      expect(await admin.call("ACL", "GETUSER", g1.username!)).not.toBeNull();
      expect(await admin.get("app:kept")).toBe("before the handover");
    } finally {
      admin.disconnect();
    }
    const g = (await mesh.grant("app", "cache"))!;
    expect(g).toMatchObject({ provider: "later-redis", generation: 2, resource: { provider: "later-redis" } });
    expect(g.conditions.find((c) => c.type === "Provisioned")?.message).toMatch(
      /handed over from boot-redis: generation 1 retired there, the resource kept with its data/,
    );
    await mesh.waitForState("app", "Ready");
  }, 90_000);
});

describe("deleting a provider that still serves a grant, with --force", () => {
  let world: Awaited<ReturnType<typeof twoRedisWorld>>;
  let mesh: TestMesh;
  let first: OwnRedis;
  let second: OwnRedis;
  let login: ProviderAdapter;
  beforeAll(async () => {
    world = await twoRedisWorld(["node-a"]);
    ({ mesh, boot: first, later: second, login } = world);
  }, 60_000);
  afterAll(async () => {
    await world?.stop();
  });

  const app: ModuleDoc = {
    kind: "Module",
    name: "app",
    parts: [{ name: "api", node: "node-a", installed: true }],
    requires: [{ name: "cache", kind: Kinds.RedisUser }],
  };

  it("re-resolves the grant to the other provider; the holder moves over and no binding it had fails to log in", async () => {
    expect(
      (await mesh.apply([provider("first-redis", first, "BOOT_REDIS_PASSWORD", 10), provider("second-redis", second, "LATER_REDIS_PASSWORD"), app])).ok,
    ).toBe(true);
    await mesh.waitForState("app", "Ready");
    expect((await mesh.grant("app", "cache"))?.provider).toBe("first-redis");

    // The holder, all along: whatever binding is on disk now must log in.
    const dir = join(mesh.bindingsRoot, "node-a", "app", "api", "cache");
    const read = (): BindingValues | undefined => {
      try {
        return Object.fromEntries(["host", "port", "username", "password"].map((k) => [k, readFileSync(join(dir, k), "utf8")]));
      } catch {
        return undefined; // between two generations' directories: read again
      }
    };
    const failures: string[] = [];
    const ports = new Set<string>();
    let logins = 0;
    let stop = false;
    const holder = (async () => {
      while (!stop) {
        const b = existsSync(dir) ? read() : undefined;
        if (b) {
          const r = await login.login({ bindings: b });
          logins++;
          ports.add(b.port!);
          if (!r.ok) failures.push(`${b.port}: ${r.message}`);
        }
        await new Promise((r) => setTimeout(r, 25));
      }
    })();

    const refused = await del({ documents: [{ kind: "Provider", name: "first-redis" }] });
    expect(refused.ok).toBe(false);
    const reply = await del({ documents: [{ kind: "Provider", name: "first-redis" }], force: true });
    expect(reply).toMatchObject({ ok: true, deleted: [{ kind: "Provider", name: "first-redis" }] });

    const key = keys.grant("app", "cache");
    const committed = await waitFor(
      "the handover to second-redis committed",
      async () => {
        const r = (await readJson(mesh.store.kv.rotations, key, Rotation))?.value;
        return r?.state === "Committed" && r.provider === "second-redis" ? r : undefined;
      },
      60_000,
    );
    expect(committed).toMatchObject({ trigger: "handover", fromProvider: "first-redis", from: 1, to: 2 });
    await waitFor("the holder's binding on second-redis", () => read()?.port === String(second.port));
    const before = logins;
    await waitFor("logins on second-redis", () => logins > before + 3);
    stop = true;
    await holder;

    expect(failures).toEqual([]);
    expect([...ports].sort()).toEqual([String(first.port), String(second.port)].sort());
    const g = (await mesh.grant("app", "cache"))!;
    expect(g).toMatchObject({ provider: "second-redis", generation: 2 });
    // The old server is out of the mesh's reach now: the grant says what it left there is the operator's.
    expect(getCondition(g.conditions, "Provisioned")?.message).toContain("handed over from first-redis, which is not registered any more");
    await mesh.waitForState("app", "Ready", 30_000);
  }, 120_000);

  async function del(body: object): Promise<DeleteReply> {
    const m = await mesh.nc.request(subjects.delete, JSON.stringify({ retained: [], ...body }), { timeout: 10_000 });
    return DeleteReply.parse(m.json());
  }
});
