import { describe, expect, it } from "vitest";
import type { Kind, ProviderDoc } from "@mesh/shared";
import { postgresProvider } from "../../../test/fixtures.js";
import { chooseProvider } from "./resolve.js";
import { blockedBy, dependencyCycle, type NeededGrant } from "./dependencies.js";

const t = [{ part: "api", node: "node-a" }];
const provider = (name: string, serves: Kind, needs: string[] = [], over: Partial<ProviderDoc> = {}): ProviderDoc => ({
  kind: "Provider",
  name,
  serves: [serves],
  node: "node-a",
  endpoint: "nats://127.0.0.1:4222",
  installed: true,
  ...(needs.length ? { needs } : {}),
  ...over,
});
const grants = (entries: Array<[string, Kind, boolean]>) => new Map<string, NeededGrant>(entries.map(([id, kind, provisioned]) => [id, { kind, provisioned }]));

describe("providers that need grants", () => {
  // An artifact store that runs as module `store`, needing its own database.
  const store = provider("store", "object.store", ["store/db"]);

  it("waits, naming what it waits for, until the needed grant is provisioned", () => {
    const waiting = chooseProvider("object.store", t, [store], null, [], { self: "shop/files", needed: grants([["store/db", "postgres.database", false]]) });
    expect(waiting.provider).toBeNull();
    expect(waiting.resolved).toMatchObject({ status: "False", reason: "AwaitingDependency" });
    expect(waiting.resolved.message).toContain("store needs store/db");

    const notDeclared = chooseProvider("object.store", t, [store], null, [], { self: "shop/files", needed: new Map() });
    expect(notDeclared.resolved.reason).toBe("AwaitingDependency");

    const ready = chooseProvider("object.store", t, [store], null, [], { self: "shop/files", needed: grants([["store/db", "postgres.database", true]]) });
    expect(ready).toMatchObject({ provider: "store", resolved: { status: "True" } });
  });

  it("prefers a provider without unmet needs over one that waits", () => {
    const bootstrap = provider("nats-store", "object.store");
    const r = chooseProvider("object.store", t, [store, bootstrap], null, [], {
      self: "shop/files",
      needed: grants([["store/db", "postgres.database", false]]),
    });
    expect(r.provider).toBe("nats-store");
  });

  it("reports a cycle, naming its members, instead of waiting for ever", () => {
    // store's object.store needs store/db; the only postgres.database provider needs store/files.
    const pg = provider("pg-in-mesh", "postgres.database", ["store/files"]);
    const providers = [store, pg];
    const needed = grants([
      ["store/db", "postgres.database", false],
      ["store/files", "object.store", false],
    ]);
    const r = chooseProvider("object.store", t, providers, null, [], { self: "store/files", needed });
    expect(r.resolved.reason).toBe("DependencyCycle");
    expect(r.resolved.message).toContain("store/files → store/db → store/files");
    expect(dependencyCycle("store/db", "postgres.database", providers, needed)).toEqual(["store/db", "store/files", "store/db"]);
    // A grant that only waits on the cycle is waiting, not a member.
    expect(dependencyCycle("shop/files", "object.store", providers, needed)).toBeUndefined();
  });

  it("is blocked by nothing when one candidate has all it needs", () => {
    const needed = grants([["store/db", "postgres.database", false]]);
    expect(blockedBy("object.store", [store, provider("other", "object.store")], needed)).toEqual([]);
    expect(blockedBy("object.store", [store], needed)).toEqual(["store/db"]);
    expect(blockedBy("secret", [store], needed)).toEqual([]);
  });

  it("keeps the provider already chosen when its needs lapse: a grant does not stop because a dependency hiccups", () => {
    const r = chooseProvider("object.store", t, [store], "store", [], { self: "shop/files", needed: grants([["store/db", "postgres.database", false]]) });
    expect(r.provider).toBe("store");
  });
});

describe("preference", () => {
  const pg = postgresProvider;
  it("a new choice takes the highest preference, before the node of the part", () => {
    const r = chooseProvider("postgres.database", t, [pg("near", "node-a"), { ...pg("far", "node-b"), preference: 10 }], null);
    expect(r.provider).toBe("far");
  });

  it("moves a grant to an installed provider with a higher preference (a handover), never to an equal one", () => {
    const installedLater = { ...pg("store-db", "node-b"), preference: 5 };
    expect(chooseProvider("postgres.database", t, [pg("boot", "node-a"), installedLater], "boot").provider).toBe("store-db");
    expect(chooseProvider("postgres.database", t, [pg("boot", "node-a"), pg("other", "node-a")], "boot").provider).toBe("boot");
  });

  it("does not move to a preferred provider that still waits for what it needs", () => {
    const waiting = { ...provider("store", "object.store", ["store/db"]), preference: 5 };
    const r = chooseProvider("object.store", t, [provider("nats-store", "object.store"), waiting], "nats-store", [], {
      self: "mesh/artifacts",
      needed: grants([["store/db", "postgres.database", false]]),
    });
    expect(r.provider).toBe("nats-store");
  });
});
