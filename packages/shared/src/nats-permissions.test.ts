import { describe, expect, it } from "vitest";
import { ErrorCodes, isMeshError } from "./index.js";
import { CONTROL_PLANE_MODULE, DEFAULT_NATS_CEILING, Kinds, bootstrapProvider, controlPlaneManifest } from "./index.js";
import {
  ceilingBreaches,
  ceilingFor,
  checkSubjectPattern,
  checkWithinCeiling,
  identityPermissions,
  inboxRefusal,
  natsCeiling,
  natsPermissions,
  responsesAllowed,
  subscribeReach,
} from "./nats-permissions.js";

/** What `fn` throws, or undefined. */
const thrown = (fn: () => unknown): unknown => {
  try {
    fn();
  } catch (e) {
    return e;
  }
  return undefined;
};
/** The MeshError code `fn` throws, or "accepted". */
const code = (fn: () => unknown) => {
  const e = thrown(fn);
  return e === undefined ? "accepted" : isMeshError(e) ? e.code : String(e);
};

describe("checkSubjectPattern", () => {
  it.each(["app.shop.>", ">", "*", "a.*.b", "$JS.API.>", "$KV.orders.>", "_INBOX.>", "a-b_c.D9", `${"a.".repeat(127)}b`])("accepts %j", (s) => {
    expect(checkSubjectPattern(s, "subject")).toBe(s);
  });

  it.each([
    "",
    "a..b",
    ".a",
    "a.",
    "a.>.b",
    "a.b>",
    "a.*b",
    "a b",
    "a\tb",
    "a\nb",
    'x"}, {user: "evil", password: "p"',
    "a\\b",
    "a{b}",
    "a#b",
    "ä.b",
    "a".repeat(256),
  ])("refuses %j as InvalidRequest", (s) => {
    expect(code(() => checkSubjectPattern(s, "subject"))).toBe(ErrorCodes.InvalidRequest);
  });

  it("refuses what is not a string", () => {
    for (const v of [undefined, 1, ["a"], { a: 1 }]) expect(code(() => checkSubjectPattern(v, "subject"))).toBe(ErrorCodes.InvalidRequest);
  });
});

describe("natsPermissions", () => {
  it("defaults both lists to the module's namespace, with no inbox and no responses", () => {
    expect(natsPermissions("shop")).toEqual({ publish: ["app.shop.>"], subscribe: ["app.shop.>"] });
    expect(natsPermissions("shop", {})).toEqual(natsPermissions("shop"));
  });

  it("takes a deny list that only narrows: checked like the others, no ceiling bounds it", () => {
    const p = natsPermissions("shop", { publish: "app.shop.>", denyPublish: ["app.shop.admin.>", "app.shop.admin.>"] });
    expect(p).toEqual({ publish: ["app.shop.>"], subscribe: ["app.shop.>"], denyPublish: ["app.shop.admin.>"] });
    expect(() =>
      checkWithinCeiling({ module: "shop", requirement: "bus" }, natsPermissions("shop", { denyPublish: ">" }), "nats-main", natsCeiling("nats-main", {})),
    ).not.toThrow();
    expect(() => natsPermissions("shop", { denyPublish: "a..b" })).toThrow(/subject in requirement option denyPublish/);
  });

  it("takes explicit lists, or one pattern as a string, each defaulting on its own", () => {
    expect(natsPermissions("shop", { publish: ["orders.created", "orders.created"] })).toEqual({
      publish: ["orders.created"],
      subscribe: ["app.shop.>"],
    });
    expect(natsPermissions("shop", { subscribe: "orders.*" })).toEqual({ publish: ["app.shop.>"], subscribe: ["orders.*"] });
    expect(natsPermissions("shop", { publish: [] }).publish).toEqual([]);
    expect(natsPermissions("shop", { allowResponses: true })).toEqual({ publish: ["app.shop.>"], subscribe: ["app.shop.>"], allowResponses: true });
    expect(natsPermissions("shop", { allowResponses: false })).toEqual(natsPermissions("shop"));
  });

  it.each([">", "*.>", "*", "*.*", "_INBOX.>", "_INBOX.*", "_MESH_INBOX.>", "_GRANT_INBOX.other.bus.>", "*.shop.bus.x", "_GRANT_INBOX.*.*.*", "*.b"])(
    "refuses to subscribe to %j, which reaches another identity's inbox, whatever a ceiling says",
    (pattern) => {
      const e = thrown(() => natsPermissions("shop", { subscribe: ["app.shop.>", pattern] }));
      expect(isMeshError(e, ErrorCodes.InvalidRequest)).toBe(true);
      expect((e as Error).message).toMatch(
        /^requirement option subscribe: subscribe ".*" is refused: it reaches "_(INBOX|MESH_INBOX|GRANT_INBOX)\.[^"]*", under _\w+\.>, where other identities get their replies/,
      );
      expect((e as Error).message).toContain("inboxPrefix");
    },
  );

  it.each(["app.>", "a.*", "a.*.b", "x.*.>", "_INBOXES.>"])("lets a subscription to %j through: it reaches no inbox", (pattern) => {
    expect(inboxRefusal(pattern)).toBeUndefined();
  });

  it("confines the JWT to the grant's own inbox: its prefix allowed, every other inbox denied, publishing into any inbox denied", () => {
    const p = identityPermissions({ module: "shop", requirement: "bus" }, natsPermissions("shop", { publish: ["app.shop.>", ">"], denyPublish: "app.shop.x" }));
    expect(p.subscribe).toEqual(["app.shop.>", "_GRANT_INBOX.shop.bus.>"]);
    expect(p.denySubscribe).toEqual(["_INBOX.>", "_MESH_INBOX.>"]);
    expect(p.denyPublish).toEqual(["app.shop.x", "_INBOX.>", "_MESH_INBOX.>", "_GRANT_INBOX.>"]);
    expect(p.allowResponses).toBeUndefined();
  });

  it.each([
    [{ publsh: ["a"] }, /publsh.*publish, subscribe/],
    [{ allowResponses: "yes" }, /allowResponses must be true or false/],
    [{ publish: 3 }, /publish must be a subject pattern or a list/],
    [{ subscribe: true }, /subscribe must be/],
    [{ publish: Array.from({ length: 65 }, (_, i) => `s${i}`) }, /65 subjects/],
    [{ publish: ["ok", "not ok"] }, /"not ok" is refused/],
  ])("refuses %j, naming the option", (options, message) => {
    const e = thrown(() => natsPermissions("shop", options as never));
    expect(isMeshError(e, ErrorCodes.InvalidRequest)).toBe(true);
    expect((e as Error).message).toMatch(message);
  });
});

describe("natsCeiling", () => {
  it("defaults to each module's own namespace, and no module may answer requests", () => {
    expect(natsCeiling("p")).toEqual(DEFAULT_NATS_CEILING);
    expect(natsCeiling("p", { signingKeysFile: "/k" })).toEqual({ publish: ["app.{module}.>"], subscribe: ["app.{module}.>"] });
    expect(responsesAllowed(natsCeiling("p"), "shop")).toBe(false);
  });

  it("takes allowResponses: a module, a list of them, or * for every module", () => {
    expect(responsesAllowed(natsCeiling("p", { allowResponses: "shop" }), "shop")).toBe(true);
    expect(responsesAllowed(natsCeiling("p", { allowResponses: ["billing", "shop"] }), "other")).toBe(false);
    expect(responsesAllowed(natsCeiling("p", { allowResponses: "*" }), "other")).toBe(true);
    expect(() => natsCeiling("p", { allowResponses: ["Shop"] })).toThrow(/options\.allowResponses entry "Shop" is not a module name/);
  });

  it("takes allowPublish and allowSubscribe, each a pattern or a list, each defaulting on its own", () => {
    expect(natsCeiling("p", { allowPublish: ["events.{module}.*", "billing:orders.>"] })).toEqual({
      publish: ["events.{module}.*", "billing:orders.>"],
      subscribe: DEFAULT_NATS_CEILING.subscribe,
    });
    expect(natsCeiling("p", { allowSubscribe: ">" })).toEqual({ publish: DEFAULT_NATS_CEILING.publish, subscribe: [">"] });
    expect(natsCeiling("p", { allowPublish: [] }).publish).toEqual([]);
  });

  it.each([
    [{ allowPublish: ["a..b"] }, /options\.allowPublish entry "a\.\.b" is not a subject pattern/],
    [{ allowSubscribe: "x{mod}" }, /options\.allowSubscribe entry "x\{mod\}" is not a subject pattern/],
    [{ allowPublish: ["Billing:orders.>"] }, /scoped to something that is not a module name/],
    [{ allowPublish: [":orders.>"] }, /scoped to something that is not a module name/],
    [{ allowPublish: ["billing:"] }, /is not a subject pattern/],
  ])("refuses %j as ProviderMisconfigured, naming the option and entry", (options, message) => {
    const e = thrown(() => natsCeiling("nats-main", options));
    expect(isMeshError(e, ErrorCodes.ProviderMisconfigured)).toBe(true);
    expect((e as Error).message).toMatch(message);
    expect((e as Error).message).toMatch(/^provider nats-main: /);
  });
});

describe("ceilingFor", () => {
  it("fills in {module}, keeps only the entries scoped to the module or to none, and adds no inbox", () => {
    const c = natsCeiling("p", { allowPublish: ["app.{module}.>", "events.{module}.*", "billing:orders.>", "mesh:>"], allowSubscribe: ["app.{module}.>"] });
    expect(ceilingFor(c, "billing")).toEqual({ publish: ["app.billing.>", "events.billing.*", "orders.>"], subscribe: ["app.billing.>"] });
    expect(ceilingFor(c, "shop")).toEqual({ publish: ["app.shop.>", "events.shop.*"], subscribe: ["app.shop.>"] });
    expect(ceilingFor(c, "mesh").publish).toContain(">");
  });
});

describe("checkWithinCeiling", () => {
  const grant = { module: "shop", requirement: "events" };

  it.each([
    ["the default permissions, under the default ceiling", {}, {}],
    ["a narrower pattern of the namespace", { publish: ["app.shop.orders.*"], subscribe: "app.shop.orders" }, {}],
    ["nothing to publish", { publish: [] }, {}],
    ["answering requests, where the ceiling lets the module", { allowResponses: true }, { allowResponses: ["shop"] }],
    ["what a widened ceiling allows", { publish: ["orders.created", "$JS.API.>"] }, { allowPublish: ["app.{module}.>", "orders.*", "$JS.API.>"] }],
    ["what a ceiling scoped to the module allows", { publish: ">" }, { allowPublish: ["shop:>"] }],
    ["a subscription ending in *, under a ceiling ending in > there", { subscribe: ["events.shop.*"] }, { allowSubscribe: ["events.{module}.>"] }],
    ["a publish ending in *, under a ceiling ending in * there", { publish: ["events.shop.*"] }, { allowPublish: ["events.{module}.*"] }],
    ["a subscription to one subject, under a ceiling ending in *", { subscribe: ["events.shop.created"] }, { allowSubscribe: ["events.{module}.*"] }],
    ["anything outside the inboxes, under a ceiling of >", { subscribe: "$SYS.>" }, { allowSubscribe: [">"] }],
    ["a pattern covered by two ceiling patterns together", { publish: ["orders.>"] }, { allowPublish: ["orders.*", "orders.*.>"] }],
  ])("allows %s", (_, options, providerOptions) => {
    expect(() => checkWithinCeiling(grant, natsPermissions("shop", options), "nats-main", natsCeiling("nats-main", providerOptions))).not.toThrow();
  });

  it.each([
    ["everything", { publish: ">" }, {}, /publish ">" \(it reaches "x"\)/],
    ["JetStream's API", { publish: ["app.shop.>", "$JS.API.>"] }, {}, /publish "\$JS\.API\.>"/],
    ["another module's namespace", { subscribe: ["app.other.>"] }, {}, /subscribe "app\.other\.>"/],
    ["> under a ceiling of *", { publish: "orders.>" }, { allowPublish: ["orders.*"] }, /publish "orders\.>" \(it reaches "orders\.x\.x"\)/],
    ["what another module's scoped entry allows", { publish: "orders.>" }, { allowPublish: ["billing:orders.>"] }, /lets module shop publish nothing/],
    [
      "a subscription ending in *, under a ceiling ending in * there (the server lets it subscribe with >)",
      { subscribe: "events.shop.*" },
      { allowSubscribe: ["events.{module}.*"] },
      /subscribe "events\.shop\.\*" \(it reaches "events\.shop\.x\.x": nats-server lets a subscription end in > where a permission ends in \*; name the last token instead\)/,
    ],
    ["the default, under a ceiling narrower than it", {}, { allowPublish: ["app.{module}.events"] }, /publish "app\.shop\.>"/],
    [
      "answering requests, where the ceiling lets no module",
      { allowResponses: true },
      {},
      /asks to answer the requests it receives \(allowResponses\).*lets module shop answer no requests/,
    ],
  ])("refuses %s as InvalidRequest, naming the subject, the ceiling and what to do", (_, options, providerOptions, message) => {
    const permissions = natsPermissions("shop", options);
    const ceiling = natsCeiling("nats-main", providerOptions);
    const e = thrown(() => checkWithinCeiling(grant, permissions, "nats-main", ceiling));
    expect(isMeshError(e, ErrorCodes.InvalidRequest)).toBe(true);
    const text = (e as Error).message;
    expect(text).toMatch(message);
    expect(text).toMatch(/^nats\.user shop\/events asks to .* past the ceiling of provider nats-main, which lets module shop /);
    expect(text).toMatch(/Ask the operator to widen the provider's options\.allow(Publish|Subscribe|Responses)/);
    expect(text).toContain('"shop:<pattern>"');
  });

  it("lists every breach, each list's ceiling once", () => {
    const breaches = ceilingBreaches(natsPermissions("shop", { publish: [">", "a.b"], subscribe: ["$SYS.>"] }), DEFAULT_NATS_CEILING, "shop");
    expect(breaches).toEqual([
      { list: "publish", pattern: ">", example: "x" },
      { list: "publish", pattern: "a.b", example: "a.b" },
      { list: "subscribe", pattern: "$SYS.>", example: "$SYS.x" },
    ]);
    const text = (
      thrown(() => checkWithinCeiling(grant, natsPermissions("shop", { publish: [">"], subscribe: ["$SYS.>"] }), "p", DEFAULT_NATS_CEILING)) as Error
    ).message;
    expect(text).toContain("lets module shop publish app.shop.>; subscribe app.shop.>");
    expect(text).toContain("options.allowPublish and options.allowSubscribe");
  });
});

describe("subscribeReach", () => {
  it.each([
    ["*", ">"],
    ["a.*", "a.>"],
    ["a.*.b", "a.*.b"],
    ["a.>", "a.>"],
    ["a.b", "a.b"],
  ])("%s reaches as far as %s", (p, reach) => {
    expect(subscribeReach(p)).toBe(reach);
  });
});

describe("the bootstrap provider's ceiling", () => {
  const doc = bootstrapProvider({
    url: "nats://127.0.0.1:4222",
    node: "node-a",
    auth: { signingKeysFile: "/k", admin: { username: "mesh-admin", passwordFile: "/a" } },
  });
  const ceiling = natsCeiling(doc.name, doc.options);

  it("admits every identity of the control plane", () => {
    const manifest = controlPlaneManifest({ servicesNode: "node-a", nodes: ["node-a", "node-b"] });
    const identities = manifest.requires.filter((r) => r.kind === Kinds.NatsUser);
    expect(identities.length).toBeGreaterThan(5);
    for (const r of identities) {
      expect(() =>
        checkWithinCeiling({ module: CONTROL_PLANE_MODULE, requirement: r.name }, natsPermissions(CONTROL_PLANE_MODULE, r.options), doc.name, ceiling),
      ).not.toThrow();
    }
  });

  it("gives every other module only its own namespace", () => {
    expect(ceilingFor(ceiling, "shop")).toEqual({ publish: ["app.shop.>"], subscribe: ["app.shop.>"] });
    expect(responsesAllowed(ceiling, "shop")).toBe(false);
    expect(responsesAllowed(ceiling, CONTROL_PLANE_MODULE)).toBe(true);
    expect(ceilingBreaches(natsPermissions("shop", { publish: ">", subscribe: "$JS.API.>" }), ceiling, "shop")).toHaveLength(2);
  });
});
