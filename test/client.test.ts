/**
 * The client SDK against a real nats-server: `declare` through the real resolver's apply
 * handler, and `watchCredentials` yielding the current credential and then each new
 * generation. Credential values come from test/harness/credential-responder.ts.
 */
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Grant, QueueGroups, keys, subjects, type Delivery } from "@mesh/shared";
import { connectNats, mutateJson, openStore, serveJson, type NatsConnection, type Store } from "@mesh/shared/runtime";
import { createLogger } from "@mesh/shared/service";
import { declare, holdCredential, isManifestRejectedError, isMeshError, watchCredentials, type CredentialUpdate } from "@mesh/client";
import { handleApply } from "@mesh/resolver";
import { startNatsServer, type NatsServer } from "./harness/nats-server.js";
import { LogCapture } from "./harness/log-capture.js";
import { credentialResponder, type CredentialResponder } from "./harness/credential-responder.js";
import { waitFor } from "./harness/wait.js";

let nats: NatsServer;
let nc: NatsConnection;
let store: Store;
let responder: CredentialResponder;
const quiet = () => createLogger("test", { destination: new LogCapture() });

beforeAll(async () => {
  nats = await startNatsServer();
  nc = await connectNats(nats.url);
  store = await openStore(nc);
  responder = credentialResponder(store, quiet());
});

afterAll(async () => {
  await responder?.stop();
  await nc?.close();
  await nats?.stop();
});

async function putGrant(requirement: string, generation: number, targets: Grant["targets"] = [{ part: "api", node: "node-a" }]): Promise<void> {
  await mutateJson(store.kv.grants, keys.grant("shop", requirement), Grant, (g): Grant => ({
    id: `shop/${requirement}`,
    module: "shop",
    requirement,
    kind: "secret",
    parts: targets.map((t) => t.part),
    targets,
    provider: "builtin-secret",
    generation,
    resource: {},
    holders: g?.holders ?? {},
    conditions: [],
  }));
}

async function publish(requirement: string, generation: number, part = "api", node = "node-a"): Promise<void> {
  const d: Delivery = {
    grant: `shop/${requirement}`,
    module: "shop",
    requirement,
    part,
    node,
    kind: "secret",
    provider: "builtin-secret",
    generation,
    publishedAt: new Date().toISOString(),
  };
  await store.js.publish(subjects.delivery(node, "shop", part, requirement), JSON.stringify(d));
}

/** A new generation: stored, set on the grant, delivered. Returns its value. */
async function rotate(requirement: string, generation: number): Promise<string> {
  const value = randomBytes(16).toString("hex");
  await responder.put("shop", requirement, generation, { type: "secret", provider: "builtin-secret", value });
  await putGrant(requirement, generation);
  await publish(requirement, generation);
  return value;
}

/**
 * `nc` as the code under test gets it, and what became of each request made through it: the
 * same connection, with its requests' outcomes recorded on the way back.
 */
function requestsOf(nc: NatsConnection): { nc: NatsConnection; outcomes: Array<{ subject: string; error?: string }> } {
  const outcomes: Array<{ subject: string; error?: string }> = [];
  const request: NatsConnection["request"] = async (subject, payload, opts) => {
    try {
      const m = await nc.request(subject, payload, opts);
      outcomes.push({ subject });
      return m;
    } catch (e) {
      outcomes.push({ subject, error: String(e) });
      throw e;
    }
  };
  const observed = new Proxy(nc, {
    get: (target, prop) => {
      if (prop === "request") return request;
      const v: unknown = Reflect.get(target, prop, target);
      return typeof v === "function" ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
  return { nc: observed, outcomes };
}

/** The next update, or a failure after `ms`. */
async function next(it: AsyncIterator<CredentialUpdate>, ms = 15_000): Promise<CredentialUpdate> {
  const r = await Promise.race([it.next(), new Promise<never>((_, rej) => setTimeout(() => rej(new Error(`no update within ${ms} ms`)), ms))]);
  if (r.done) throw new Error("the watch ended");
  return r.value;
}

describe("watchCredentials", () => {
  it("yields the current credential first, then each new generation, never an older one", async () => {
    const v1 = await rotate("session-key", 1);
    const v2 = await rotate("session-key", 2);
    const watch = await watchCredentials(nc, { module: "shop", part: "api", requirement: "session-key" });
    const it = watch[Symbol.asyncIterator]();
    // Generation 1 was superseded before the watch began: the first value is the current one.
    const first = await next(it);
    expect(first).toEqual({
      grant: "shop/session-key",
      requirement: "session-key",
      generation: 2,
      values: { type: "secret", provider: "builtin-secret", value: v2 },
      env: {},
    });
    expect(first.values.value).not.toBe(v1);

    const v3 = await rotate("session-key", 3);
    expect(await next(it)).toMatchObject({ generation: 3, values: { value: v3 } });

    // An old delivery coming again is passed over; the next update is the next generation.
    await publish("session-key", 2);
    const v4 = await rotate("session-key", 4);
    expect(await next(it)).toMatchObject({ generation: 4, values: { value: v4 } });

    await watch.stop();
    expect(await it.next()).toEqual({ value: undefined, done: true });
    expect(await watch.closed).toBeUndefined();
  });

  it("watches every requirement of a part when none is named", async () => {
    const a = await rotate("token-a", 1);
    const b = await rotate("token-b", 1);
    const watch = await watchCredentials(nc, { module: "shop", part: "api" });
    const seen = new Map<string, string>();
    for await (const u of watch) {
      seen.set(u.requirement, u.values.value!);
      if (seen.has("token-a") && seen.has("token-b")) break; // break stops the watch
    }
    expect(seen.get("token-a")).toBe(a);
    expect(seen.get("token-b")).toBe(b);
    expect(await watch.closed).toBeUndefined();
  });

  it("waits for a provisioner that is not there yet", async () => {
    await responder.stop();
    const value = await rotate("late", 1);
    const fetches = requestsOf(nc);
    const watch = await watchCredentials(fetches.nc, { module: "shop", part: "api", requirement: "late" });
    const it = watch[Symbol.asyncIterator]();
    const pending = next(it, 20_000);
    const subject = subjects.credentialFetch("shop", "late", "node-a", "api");
    await waitFor("the watch's fetch to find no provisioner", () =>
      fetches.outcomes.some((o) => o.subject === subject && /no responders/i.test(o.error ?? "")),
    );
    responder.start();
    expect((await pending).values.value).toBe(value);
    await watch.stop();
  });

  it("ends with the error when the newest delivery cannot be fetched and no onError is given", async () => {
    // worker is not a target of the grant: the credential source refuses (NotFound, not retryable).
    await publish("session-key", 4, "worker", "node-b");
    const watch = await watchCredentials(nc, { module: "shop", part: "worker" });
    let err: unknown;
    try {
      for await (const _ of watch) throw new Error("no update expected");
    } catch (e) {
      err = e;
    }
    expect(isMeshError(err, "NotFound")).toBe(true);
    expect(await watch.closed).toBe(err);
  });

  it("reports such a failure to onError and goes on when one is given", async () => {
    await publish("session-key", 4, "worker", "node-b");
    const errors: string[] = [];
    const watch = await watchCredentials(nc, { module: "shop", part: "worker", onError: (e, d) => errors.push(`${d.grant}@${d.generation}: ${e.code}`) });
    await waitFor("the failure reported to onError", () => errors.length > 0 || undefined, 10_000);
    expect(errors).toEqual(["shop/session-key@4: NotFound"]);
    await watch.stop();
    expect(await watch.closed).toBeUndefined();
  });

  it("refuses bad names at once", async () => {
    await expect(watchCredentials(nc, { module: "shop", part: "../x" })).rejects.toThrow(/part/);
    await expect(watchCredentials(nc, { module: "shop", part: "api", requirement: "a.b" })).rejects.toThrow(/requirement/);
  });
});

describe("holdCredential", () => {
  it("yields the first generation of a grant provisioned after it started holding", async () => {
    const holder = await holdCredential(nc, { module: "shop", part: "api", node: "node-a", requirement: "held-late" });
    try {
      const it = holder[Symbol.asyncIterator]();
      const first = it.next();
      // Nothing to yield yet: no grant. Then it is provisioned, as a declared requirement is moments later.
      await waitFor("the holder's registration", async () => {
        for await (const k of await store.kv.holders.keys()) if (k.startsWith("shop.held-late.")) return true;
        return false;
      });
      const value = await rotate("held-late", 1);
      expect((await first).value).toMatchObject({ grant: "shop/held-late", generation: 1, values: { value } });
    } finally {
      await holder.stop();
    }
  });

  it("starts on a server that does not answer for longer than a JetStream request waits", async () => {
    await rotate("held-paused", 1);
    // A server that stops answering for a while (a cluster electing leaders, or one busy with
    // thousands of instances starting at once): its first requests time out (5 s), the later ones are answered.
    const held = new Promise((resolve, reject) => {
      holdCredential(nc, { module: "shop", part: "api", node: "node-a", requirement: "held-paused" }).then(resolve, reject);
    });
    process.kill(nats.pid, "SIGSTOP");
    try {
      await new Promise((r) => setTimeout(r, 6_000));
    } finally {
      process.kill(nats.pid, "SIGCONT");
    }
    const holder = (await held) as Awaited<ReturnType<typeof holdCredential>>;
    try {
      const first = await holder[Symbol.asyncIterator]().next();
      expect(first.value).toMatchObject({ grant: "shop/held-paused", generation: 1 });
    } finally {
      await holder.stop();
    }
  }, 30_000);
});

describe("declare", () => {
  const manifest = `kind: Module
name: blog
parts:
  - { name: web, node: node-a }
requires:
  - { name: db, kind: postgres.database, parts: [web] }
`;

  it("says so when no resolver answers", async () => {
    let err: unknown;
    try {
      await declare(nc, manifest);
    } catch (e) {
      err = e;
    }
    expect(isMeshError(err, "Unavailable")).toBe(true);
    expect((err as Error).message).toContain("mesh-resolver");
  });

  it("rejects an invalid manifest before sending it, listing every problem", async () => {
    let err: unknown;
    try {
      await declare(nc, "kind: Module\nname: Bad_Name\nrequires:\n  - { name: db }\n", { source: "bad.yaml" });
    } catch (e) {
      err = e;
    }
    // Unavailable would mean it was sent: nothing answers on the subject in this test.
    expect(isManifestRejectedError(err)).toBe(true);
    if (!isManifestRejectedError(err)) return;
    expect(err.code).toBe("InvalidManifest");
    expect(err.problems.map((p) => p.path)).toEqual(expect.arrayContaining(["name", "requires[0].kind"]));
    expect(err.message).toContain("bad.yaml");
  });

  it("declares text and documents through the resolver's apply handler", async () => {
    const api = serveJson(nc, subjects.apply, QueueGroups.resolver, quiet(), (body) => handleApply(store, body));
    try {
      const r1 = await declare(nc, manifest, { source: "blog.yaml" });
      expect(r1).toEqual({ ok: true, accepted: [{ kind: "Module", name: "blog", action: "created" }] });
      const r2 = await declare(nc, [
        { kind: "Module", name: "blog", parts: [{ name: "web", node: "node-a" }], requires: [{ name: "db", kind: "postgres.database", parts: ["web"] }] },
      ]);
      expect(r2.accepted).toEqual([{ kind: "Module", name: "blog", action: "unchanged" }]);
      expect(await store.kv.manifests.get("blog")).toBeTruthy();
    } finally {
      await api.stop();
    }
  });

  it("the resolver's apply refuses a nats.user asking past every provider's ceiling, and stores nothing", async () => {
    const api = serveJson(nc, subjects.apply, QueueGroups.resolver, quiet(), (body) => handleApply(store, body));
    try {
      const provider = (options: Record<string, string | string[]>) => ({
        kind: "Provider",
        name: "nats-ceiling",
        serves: ["nats.user"],
        node: "node-a",
        endpoint: "nats://127.0.0.1:4222",
        options,
      });
      const module = {
        kind: "Module",
        name: "greedy",
        parts: [{ name: "web", node: "node-a" }],
        requires: [{ name: "bus", kind: "nats.user", options: { subscribe: "app.>" } }],
      };
      expect((await declare(nc, [provider({ signingKeysFile: "/k" })])).ok).toBe(true);
      const refused = await declare(nc, [module]).catch((e: unknown) => e);
      expect(isManifestRejectedError(refused)).toBe(true);
      if (!isManifestRejectedError(refused)) return;
      expect(refused.problems).toEqual([
        {
          document: 0,
          path: "requires[0].options",
          message: expect.stringMatching(
            /^nats\.user greedy\/bus asks to subscribe "app\.>" .*past the ceiling of provider nats-ceiling.*Ask the operator to widen/,
          ),
        },
      ]);
      expect(await store.kv.manifests.get("greedy")).toBeNull();
      // Widened by the operator in the same apply: accepted.
      const r = await declare(nc, [provider({ signingKeysFile: "/k", allowSubscribe: "greedy:app.>" }), module]);
      expect(r.accepted.map((a) => a.name)).toEqual(["nats-ceiling", "greedy"]);
    } finally {
      await api.stop();
    }
  });

  it("turns the resolver's rejection and error replies into errors", async () => {
    let reply: unknown = { ok: false, problems: [{ document: 0, path: "requires[0].kind", message: "required" }] };
    const api = serveJson(nc, subjects.apply, "test-apply", quiet(), async () => reply);
    try {
      const rejected = await declare(nc, manifest).catch((e: unknown) => e);
      expect(isManifestRejectedError(rejected)).toBe(true);
      reply = { ok: false, error: { code: "Conflict", message: "try again", retryable: true } };
      const failed = await declare(nc, manifest).catch((e: unknown) => e);
      expect(isMeshError(failed, "Conflict")).toBe(true);
      expect(isManifestRejectedError(failed)).toBe(false);
      expect((failed as { retryable: boolean }).retryable).toBe(true);
    } finally {
      await api.stop();
    }
  });
});
