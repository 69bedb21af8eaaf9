import { describe, expect, it } from "vitest";
import { ErrorCodes, isMeshError } from "@mesh/shared";
import { INBOX_PATTERN, checkSubjectPattern, natsPermissions } from "./nats-permissions.js";

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
