/**
 * `meshctl apply` past one request: 600 modules go in three requests to a real resolver and
 * are all stored; and when the resolver does not answer in time, meshctl says exactly which
 * documents are stored, read back from the store — here against a stand-in for a stuck
 * resolver on a real nats-server (it stores some documents itself and never replies).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ModuleDoc, subjects } from "@mesh/shared";
import { readJson, type NatsConnection, type Store } from "@mesh/shared/runtime";
import { createLogger } from "@mesh/shared/service";
import { startResolver, type Resolver } from "@mesh/resolver";
import { sendApply } from "../packages/cli/src/apply-command.js";
import { CliError } from "../packages/cli/src/cli-error.js";
import { startStoreServer, type StoreServer } from "./harness/store-server.js";

const mod = (name: string): ModuleDoc => ({ kind: "Module", name, parts: [{ name: "api", node: "node-a", installed: true }], requires: [] });
const filesOf = (names: string[]) => [0, 1, 2].map((f) => ({ source: `${f}.yaml`, documents: names.slice(f * 200, (f + 1) * 200).map(mod) }));

describe("meshctl apply of more documents than one request holds", () => {
  let server: StoreServer;
  let nc: NatsConnection;
  let store: Store;
  beforeAll(async () => {
    server = await startStoreServer();
    ({ nc, store } = server);
  });
  afterAll(async () => {
    await server?.stop();
  });

  it("stores all 600 through a real resolver, in order", async () => {
    const resolver: Resolver = await startResolver({ store, log: createLogger("resolver", { level: "silent" }) });
    try {
      const names = Array.from({ length: 600 }, (_, i) => `big-${i}`);
      const outcome = await sendApply(nc, filesOf(names));
      expect(outcome.ok).toBe(true);
      if (!outcome.ok) return;
      expect(outcome.accepted.map((a) => a.name)).toEqual(names);
      expect(outcome.accepted.every((a) => a.action === "created")).toBe(true);
      for (const n of [names[0]!, names[299]!, names[599]!]) expect((await readJson(store.kv.manifests, n, ModuleDoc))?.value).toEqual(mod(n));
    } finally {
      await resolver.stop();
    }
  });

  it("past its deadline, says exactly which documents are stored", async () => {
    const names = Array.from({ length: 600 }, (_, i) => `stuck-${i}`);
    // A stuck resolver: it stores the first request's first 100 documents and never answers.
    const sub = nc.subscribe(subjects.apply, { max: 1 });
    void (async () => {
      for await (const m of sub) {
        const { documents } = m.json<{ documents: ModuleDoc[] }>();
        for (const d of documents.slice(0, 100)) await store.kv.manifests.put(d.name, JSON.stringify(d));
      }
    })();
    const err = await sendApply(nc, filesOf(names), 1_500).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(CliError);
    const message = (err as CliError).message;
    expect(message).toContain("the resolver did not answer within 2 s");
    expect(message).toContain("Of the 600 documents, 100 are stored as the files say, 500 are not:");
    for (const n of names.slice(0, 100)) expect(message).toContain(`module/${n} stored\n`);
    for (const n of names.slice(100, 599)) expect(message).toContain(`module/${n} not stored\n`);
    expect(message.endsWith(`module/${names[599]} not stored`)).toBe(true);
  });
});
