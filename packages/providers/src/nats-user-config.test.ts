import { describe, expect, it } from "vitest";
import { ErrorCodes, isMeshError } from "@mesh/shared";
import {
  INBOX_PATTERN,
  RECORD_MARKER,
  checkAdminName,
  checkSubjectPattern,
  confString,
  isRenderedUsersFile,
  natsPermissions,
  natsUserName,
  parseUserRecord,
  probeUserName,
  renderUsersFile,
  renderedRevision,
  revisionOf,
  userEntry,
  type UserRecord,
} from "./nats-user-config.js";

const HASH = `$2b$06$${"a".repeat(53)}`;
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
  it("defaults both lists to the module's namespace, and adds the inbox to subscribe", () => {
    expect(natsPermissions("shop")).toEqual({ publish: ["app.shop.>"], subscribe: ["app.shop.>", INBOX_PATTERN] });
    expect(natsPermissions("shop", {})).toEqual(natsPermissions("shop"));
  });

  it("takes explicit lists, or one pattern as a string, each defaulting on its own", () => {
    expect(natsPermissions("shop", { publish: ["orders.created", "orders.created"] })).toEqual({
      publish: ["orders.created"],
      subscribe: ["app.shop.>", INBOX_PATTERN],
    });
    expect(natsPermissions("shop", { subscribe: "orders.*" })).toEqual({ publish: ["app.shop.>"], subscribe: ["orders.*", INBOX_PATTERN] });
    expect(natsPermissions("shop", { subscribe: ["_INBOX.>", "a"] }).subscribe).toEqual(["_INBOX.>", "a"]);
    expect(natsPermissions("shop", { publish: [] }).publish).toEqual([]);
  });

  it.each([
    [{ publsh: ["a"] }, /publsh.*publish, subscribe/],
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

describe("names", () => {
  it("gives odd generations user _a and even ones _b", () => {
    expect([1, 2, 3, 4].map((g) => natsUserName("my-shop", "orders-db", g))).toEqual([
      "my-shop_orders-db_a",
      "my-shop_orders-db_b",
      "my-shop_orders-db_a",
      "my-shop_orders-db_b",
    ]);
  });

  it("refuses admin names that are not plain or that look like a probe", () => {
    expect(checkAdminName("mesh-admin", "provider p")).toBe("mesh-admin");
    for (const bad of ["", "a b", 'a"', "-a", "mesh-probe-x", undefined]) {
      expect(code(() => checkAdminName(bad, "provider p"))).toBe(ErrorCodes.ProviderMisconfigured);
    }
  });
});

describe("confString", () => {
  it("quotes what is safe and refuses the rest", () => {
    expect(confString("$2b$06$x./Y")).toBe('"$2b$06$x./Y"');
    for (const bad of ["", "a b", 'a"b', "a\\b", "a\nb", "é", "a\u0000"]) expect(code(() => confString(bad))).toBe(ErrorCodes.Internal);
  });
});

const admin: UserRecord = { mesh: RECORD_MARKER, user: "mesh-admin", passwordHash: HASH };
const userRecord = (user: string, publish = ["app.shop.>"]): UserRecord => ({
  mesh: RECORD_MARKER,
  user,
  passwordHash: HASH.replace("a", "b"),
  grant: "shop/db",
  generation: 1,
  permissions: { publish, subscribe: ["app.shop.>", INBOX_PATTERN] },
});

describe("parseUserRecord", () => {
  it("reads back what is written", () => {
    for (const r of [admin, userRecord("shop_db_a")]) expect(parseUserRecord(JSON.stringify(r))).toEqual(r);
  });

  it.each([
    ["no marker", { ...admin, mesh: "other" }],
    ["a hostile user", { ...admin, user: 'x", password: "' }],
    ["a probe's name", { ...admin, user: "mesh-probe-0123" }],
    ["a hash that is not bcrypt", { ...admin, passwordHash: "plaintext" }],
    ["a bad grant", { ...userRecord("u"), grant: "shop" }],
    ["a bad generation", { ...userRecord("u"), generation: 0 }],
    ["a hostile subject", userRecord("u", ['a"}']) as UserRecord],
    ["admin permissions", { ...admin, permissions: { publish: [], subscribe: [] } }],
  ])("refuses %s", (_, r) => {
    expect(() => parseUserRecord(JSON.stringify(r))).toThrow();
  });
});

describe("renderUsersFile", () => {
  const records = [userRecord("shop_db_b"), admin, userRecord("shop_db_a")];

  it("holds the admin with every subject, the probe of its revision, and each user with its permissions", () => {
    const text = renderUsersFile(records, "/etc/mesh/nats/users/mesh-users.conf.d");
    const revision = revisionOf(records);
    expect(isRenderedUsersFile(text)).toBe(true);
    expect(renderedRevision(text)).toBe(revision);
    expect(text).toContain(`{user: "mesh-admin", password: "${HASH}"}`);
    expect(text).toContain(`{user: "${probeUserName(revision)}", password: "${HASH}", permissions: {publish: {deny: [">"]}, subscribe: {deny: [">"]}}}`);
    expect(text).toContain(userEntry(records[0]!));
    expect(userEntry(records[0]!)).toBe(
      `{user: "shop_db_b", password: "${records[0]!.passwordHash}", permissions: {publish: {allow: ["app.shop.>"]}, subscribe: {allow: ["app.shop.>", "_INBOX.>"]}, allow_responses: true}}`,
    );
    expect(text.indexOf("shop_db_a")).toBeLessThan(text.indexOf("shop_db_b"));
  });

  it("denies every subject for an empty list", () => {
    expect(userEntry(userRecord("u", []))).toContain('publish: {deny: [">"]}');
  });

  it("has a revision that depends on the records, not their order", () => {
    expect(revisionOf([...records].reverse())).toBe(revisionOf(records));
    expect(revisionOf(records.slice(1))).not.toBe(revisionOf(records));
    expect(revisionOf([admin, { ...userRecord("shop_db_a"), passwordHash: HASH }])).not.toBe(revisionOf([admin, userRecord("shop_db_a")]));
  });

  it("refuses to render without the admin, so the mesh never locks itself out", () => {
    expect(code(() => renderUsersFile([userRecord("shop_db_a")], "/d"))).toBe(ErrorCodes.Internal);
  });

  it("does not take a file of someone else's for its own", () => {
    expect(isRenderedUsersFile('authorization { users = [ {user: "a", password: "b"} ] }\n')).toBe(false);
    expect(renderedRevision("# mesh-revision: 0123456789abcdef\n")).toBeUndefined();
  });
});
