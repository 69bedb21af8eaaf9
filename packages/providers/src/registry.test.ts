import { describe, expect, it } from "vitest";
import { ErrorCodes, KIND_LIST, Kinds, isMeshError } from "@mesh/shared";
import { adapterKinds, createAdapter } from "./registry.js";

const provider = { name: "p", node: "node-a", endpoint: "postgres://127.0.0.1:5432" };

describe("createAdapter", () => {
  it.each([
    [Kinds.Secret, "builtin://secret"],
    [Kinds.PostgresDatabase, "postgres://127.0.0.1:5432"],
    [Kinds.MariadbDatabase, "mysql://127.0.0.1:3306"],
    [Kinds.RedisUser, "redis://127.0.0.1:6379"],
    [Kinds.KvBucket, "nats://127.0.0.1:4222"],
    [Kinds.ObjectStore, "nats://127.0.0.1:4222"],
    [Kinds.RabbitmqVhost, "amqp://127.0.0.1:5672", { managementUrl: "http://127.0.0.1:15672" }],
    [Kinds.NpmRegistry, "http://127.0.0.1:4873", { usersDir: "/var/lib/mesh/verdaccio-users" }],
    [Kinds.NatsUser, "nats://127.0.0.1:4222", { signingKeysFile: "/etc/mesh/nats-operator/signing-keys.json" }],
  ])("makes an adapter serving %s", async (kind, endpoint, options?: Record<string, string>) => {
    const admin = { username: "mesh-admin", password: "not-used-here" };
    const adapter = createAdapter(kind, { ...provider, endpoint, admin, ...(options ? { options } : {}) });
    expect(adapter.kinds).toContain(kind);
    await adapter.close();
  });

  it("has an adapter for every kind a manifest may ask for", () => {
    expect(adapterKinds).toEqual([...KIND_LIST].sort());
  });

  it("refuses a kind without an adapter, naming the kinds that have one", () => {
    try {
      createAdapter("no.such", provider);
      expect.unreachable();
    } catch (e) {
      expect(isMeshError(e, ErrorCodes.ProviderMisconfigured)).toBe(true);
      expect((e as Error).message).toContain('"no.such"');
      expect((e as Error).message).toContain(adapterKinds.join(", "));
    }
  });

  it("refuses a postgres provider whose endpoint is not a postgres URL", () => {
    expect(() => createAdapter(Kinds.PostgresDatabase, { ...provider, endpoint: "http://x" })).toThrow(/postgres:\/\//);
  });
});
