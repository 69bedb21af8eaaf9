import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { ErrorCodes, Kinds, isMeshError } from "@mesh/shared";
import type { ProviderConfig } from "./adapter.js";
import { RABBITMQ_NAME, createRabbitmqAdapter, rabbitmqNames, rabbitmqPasswordHash, rabbitmqUserName } from "./rabbitmq.js";
import { meshName } from "../../../test/harness/arbitraries.js";
import { refused } from "../../../test/harness/refusals.js";

const provider = (over: Partial<ProviderConfig> = {}): ProviderConfig => ({
  name: "rabbit-test",
  node: "node-a",
  endpoint: "amqp://127.0.0.1:5672",
  admin: { username: "guest", password: "admin-secret" },
  options: { managementUrl: "http://127.0.0.1:15672" },
  ...over,
});

describe("rabbitmqNames", () => {
  it.each([
    ["shop", "db", "shop_db"],
    ["my-shop", "events", "my__shop_events"],
    ["a", "b-c", "a_b_c"],
  ])("%s/%s → vhost %s, users %s_a and %s_b", (module, requirement, vhost) => {
    expect(rabbitmqNames(module, requirement)).toEqual({ vhost, users: [`${vhost}_a`, `${vhost}_b`] });
  });

  it("maps every pair of mesh names to valid names, one-to-one, never shortened", () => {
    fc.assert(
      fc.property(meshName, meshName, meshName, meshName, (m1, r1, m2, r2) => {
        const a = rabbitmqNames(m1, r1);
        for (const n of [a.vhost, ...a.users]) expect(n).toMatch(RABBITMQ_NAME);
        expect(a.vhost).not.toContain("___");
        if (m1 !== m2 || r1 !== r2) expect(rabbitmqNames(m2, r2).vhost).not.toBe(a.vhost);
      }),
    );
    const longest = `${"a-".repeat(19)}ab`; // 40 characters, 19 hyphens doubled
    expect(rabbitmqNames(longest, "r".repeat(40)).vhost).toHaveLength(100);
  });

  it("alternates users by generation", () => {
    expect([1, 2, 3, 4].map((g) => rabbitmqUserName("shop_db", g))).toEqual(["shop_db_a", "shop_db_b", "shop_db_a", "shop_db_b"]);
  });

  it("refuses what is not a name of its mapping", () => {
    for (const base of ['x"; drop', "a/b", "A", "_x", "x%2Fy"]) {
      expect(refused(ErrorCodes.InvalidName, () => rabbitmqUserName(base, 1))).toMatch(/refused/);
    }
  });
});

describe("rabbitmqPasswordHash", () => {
  it("matches the hash RabbitMQ 3.10 stored for guest/guest", () => {
    const stored = "c9M77o770TklA+lF2BXawH+m21X/wNsiwhNVADMcmO70Z6Un";
    expect(rabbitmqPasswordHash("guest", Buffer.from(stored, "base64").subarray(0, 4))).toBe(stored);
  });

  it("salts: the same password hashes differently each time, and never shows the password", () => {
    const a = rabbitmqPasswordHash("p4ss");
    expect(a).not.toBe(rabbitmqPasswordHash("p4ss"));
    expect(Buffer.from(a, "base64")).toHaveLength(36);
    expect(a).not.toContain("p4ss");
  });
});

describe("createRabbitmqAdapter", () => {
  it("serves rabbitmq.vhost", () => {
    expect(createRabbitmqAdapter(provider()).kinds).toEqual([Kinds.RabbitmqVhost]);
  });

  it.each<[string, Partial<ProviderConfig>, RegExp]>([
    ["an endpoint of another scheme", { endpoint: "http://127.0.0.1:5672" }, /amqp:\/\//],
    ["an endpoint with a vhost", { endpoint: "amqp://127.0.0.1:5672/shop" }, /names a vhost/],
    ["an endpoint with a user", { endpoint: "amqp://u:p@127.0.0.1:5672" }, /holds a user/],
  ])("refuses %s as ProviderMisconfigured at once, saying what to set", (_, over, message) => {
    const m = refused(ErrorCodes.ProviderMisconfigured, () => createRabbitmqAdapter(provider(over)));
    expect(m).toMatch(message);
    expect(m).not.toContain("admin-secret");
  });

  // What only the management API needs is refused by the admin verbs: an agent makes
  // login-only adapters from the document, without the admin's password.
  it.each<[string, Partial<ProviderConfig>, RegExp]>([
    ["no managementUrl", { options: {} }, /options\.managementUrl is not set/],
    ["no options at all", { options: undefined }, /set options\.managementUrl/],
    ["a managementUrl that is no URL", { options: { managementUrl: "localhost:15672" } }, /not an http/],
    ["a managementUrl with a user", { options: { managementUrl: "http://guest:pw@127.0.0.1:15672" } }, /admin\.passwordEnv/],
    ["an unknown option", { options: { managementUrl: "http://127.0.0.1:15672", managementURL: "x" } }, /unknown option "managementURL"/],
    ["no admin", { admin: undefined }, /admin\.passwordEnv or admin\.passwordFile/],
    ["an admin other than guest without a password", { admin: { username: "mesh-admin" } }, /admin\.passwordEnv or admin\.passwordFile/],
  ])("refuses %s as ProviderMisconfigured in every admin verb, saying what to set", async (_, over, message) => {
    const a = createRabbitmqAdapter(provider(over));
    const grant = { module: "shop", requirement: "events", generation: 1 };
    for (const call of [() => a.create({ grant, secret: a.generate() }), () => a.observe({ grant }), () => a.delete({ grant }), () => a.retire({ grant })]) {
      const e = await call().then(
        () => undefined,
        (err: unknown) => err,
      );
      expect(isMeshError(e, ErrorCodes.ProviderMisconfigured), String(e)).toBe(true);
      expect((e as Error).message).toMatch(message);
      expect((e as Error).message).not.toContain("admin-secret");
    }
  });

  it("accepts amqps and a management URL behind a path prefix", () => {
    const a = createRabbitmqAdapter(provider({ endpoint: "amqps://mq.example:5671", options: { managementUrl: "https://mq.example/rabbit/" } }));
    expect(a.kinds).toEqual([Kinds.RabbitmqVhost]);
  });
});

describe("the admin verbs of a provider whose management URL cannot be used", () => {
  it("loginAdmin says unreachable, naming the option, without trying any password", async () => {
    const a = createRabbitmqAdapter(provider({ options: {} }));
    const r = await a.loginAdmin!({ password: "tried-nowhere" });
    expect(r).toMatchObject({ ok: false, reason: "unreachable" });
    expect(!r.ok && r.message).toContain("options.managementUrl is not set");
    expect(JSON.stringify(r)).not.toContain("tried-nowhere");
  });
});
