/**
 * A membership whose watch of the others' heartbeats ends while it runs (the client library
 * ends a watch whose consumer it cannot keep, and says so only by ending it) would see itself
 * alone and take every key for good. Its `closed` rejects instead, and a verifier built on it
 * fails the same way, so its service exits and is started again. Against a real nats-server;
 * the KV handed over is the store's own, with the watch it returns kept so the test can end it.
 */
import type { KV, KvWatchOptions } from "@nats-io/kv";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseMasterKey } from "@mesh/shared";
import { joinMembership, type Store } from "@mesh/shared/runtime";
import { createLogger } from "@mesh/shared/service";
import { startVerifier } from "@mesh/verifier";
import { startStoreServer, type StoreServer } from "./harness/store-server.js";
import { LogCapture } from "./harness/log-capture.js";

/** `kv` itself, but its watches are kept in `watches` as they are made. */
function keepingWatches(kv: KV, watches: Array<{ stop(): void }>): KV {
  return new Proxy(kv, {
    get(target, prop, receiver) {
      if (prop !== "watch") return Reflect.get(target, prop, receiver) as unknown;
      return async (o?: KvWatchOptions) => {
        const w = await target.watch(o);
        watches.push(w);
        return w;
      };
    },
  });
}

describe("a membership whose watch ends while it runs", () => {
  let server: StoreServer;
  let store: Store;
  const log = createLogger("test", { destination: new LogCapture(), level: "debug" });

  beforeAll(async () => {
    server = await startStoreServer();
    store = server.store;
  });
  afterAll(async () => {
    await server?.stop();
  });

  it("rejects closed, saying what ended; after leave() it never does", async () => {
    const watches: Array<{ stop(): void }> = [];
    const kv = keepingWatches(store.kv.instances, watches);
    const a = await joinMembership({ kv, service: "ended", instance: "ended-a", log });
    const b = await joinMembership({ kv, service: "ended", instance: "ended-b", log });
    expect(watches).toHaveLength(2);
    let bClosed: unknown;
    b.closed.catch((e: unknown) => (bClosed = e));

    watches[0]!.stop();
    await expect(a.closed).rejects.toThrow(/the watch of the ended instances' heartbeats ended.*as if it were alone/);

    await b.leave();
    await new Promise((r) => setTimeout(r, 200));
    expect(bClosed).toBeUndefined();
    await a.leave();
  });

  it("fails the verifier whose grant watch ends, and not one that stopped", async () => {
    const masterKey = parseMasterKey("11".repeat(32));
    const watches: Array<{ stop(): void }> = [];
    const watched: Store = { ...store, kv: { ...store.kv, grants: keepingWatches(store.kv.grants, watches) } };
    const ended = await startVerifier({ store: watched, masterKey, log, instance: "verifier@ended/1", intervalMs: 60_000 });
    expect(watches).toHaveLength(1);
    watches[0]!.stop();
    await expect(ended.closed).rejects.toThrow(/the watch of the grants in KV mesh-grants ended/);
    await ended.stop();

    const stopped = await startVerifier({ store, masterKey, log, instance: "verifier@ended/2", intervalMs: 60_000 });
    let failed: unknown;
    stopped.closed.catch((e: unknown) => (failed = e));
    await stopped.stop();
    await new Promise((r) => setTimeout(r, 200));
    expect(failed).toBeUndefined();
  });
});
