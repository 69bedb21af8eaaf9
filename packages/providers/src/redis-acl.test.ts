import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { ErrorCodes, NAME_PATTERN, isMeshError } from "@mesh/shared";
import { MESH_KEY_PREFIX, REDIS_USER_NAME, aclRules, parseAclUser, passwordHash, recordSelector, redisNames } from "./redis-acl.js";
import { slotOf } from "./alternating.js";

const meshName = fc
  .stringMatching(/^[a-z](?:-?[a-z0-9]){0,39}$/)
  .map((s) => s.slice(0, 40).replace(/-$/, ""))
  .filter((s) => NAME_PATTERN.test(s));

const H1 = "a".repeat(64);
const H2 = "b".repeat(64);

describe("redisNames", () => {
  it("names the user mesh.<module>.<requirement>, its prefix <module>:, its version key under _mesh:", () => {
    expect(redisNames("shop", "cache")).toEqual({ user: "mesh.shop.cache", keyPrefix: "shop:", mark: "shop/cache", versionKey: "_mesh:acl:mesh.shop.cache" });
  });

  it("is one-to-one over mesh names, and no key prefix covers the mesh's keys", () => {
    fc.assert(
      fc.property(meshName, meshName, meshName, meshName, (m1, r1, m2, r2) => {
        const a = redisNames(m1, r1);
        const b = redisNames(m2, r2);
        expect(REDIS_USER_NAME.test(a.user)).toBe(true);
        expect(a.user === b.user).toBe(m1 === m2 && r1 === r2);
        expect(b.versionKey.startsWith(a.keyPrefix)).toBe(false);
        expect(MESH_KEY_PREFIX.startsWith(a.keyPrefix)).toBe(false);
      }),
    );
    expect(redisNames("mesh", "x").keyPrefix).toBe("mesh:");
  });

  it.each(["a*", "a?", "a[b]", "a\\b", "a b", "a.b", "a:b", "A", "", "1a", 'x"; FLUSHALL'])("refuses %j, which could widen or break an ACL rule", (bad) => {
    for (const [m, r] of [
      [bad, "x"],
      ["x", bad],
    ] as const) {
      let err: unknown;
      try {
        redisNames(m, r);
      } catch (e) {
        err = e;
      }
      expect(isMeshError(err, ErrorCodes.InvalidName), String(err)).toBe(true);
    }
  });
});

describe("aclRules", () => {
  it("resets first, then sets the hashes, the module's keys and channels, the command rules and the record", () => {
    const record = { grant: "shop/cache", a: { generation: 3, hash: H1 }, b: { generation: 2, hash: H2 } };
    expect(aclRules(redisNames("shop", "cache"), record)).toEqual([
      "reset",
      "on",
      `#${H1}`,
      `#${H2}`,
      "~shop:*",
      "&shop:*",
      "+@all",
      "-@dangerous",
      "-function",
      "-script|flush",
      "-script|kill",
      `(~_mesh:grant:shop/cache ~_mesh:a:3:${H1} ~_mesh:b:2:${H2} resetchannels -@all)`,
    ]);
    expect(aclRules(redisNames("shop", "cache"), { grant: "shop/cache" })).not.toContainEqual(expect.stringMatching(/^#/));
  });
});

describe("passwordHash", () => {
  it("hashes as Redis does: SHA-256 of the UTF-8 bytes, hex", () => {
    expect(passwordHash("secret1")).toBe(createHash("sha256").update("secret1").digest("hex"));
    expect(passwordHash("é")).toBe(
      createHash("sha256")
        .update(Buffer.from([0xc3, 0xa9]))
        .digest("hex"),
    );
  });

  it.each([
    [1, "a"],
    [2, "b"],
    [3, "a"],
    [10, "b"],
  ] as const)("generation %i goes to slot %s", (g, slot) => {
    expect(slotOf(g)).toBe(slot);
  });
});

/** An `ACL GETUSER` reply as Redis 7.0 gives it, with `selectors`. */
const getUser = (selectors: unknown[]) => [
  "flags",
  ["on", "sanitize-payload"],
  "passwords",
  [H1],
  "commands",
  "+@all",
  "keys",
  "~shop:*",
  "channels",
  "&shop:*",
  "selectors",
  selectors,
];
const selectorOf = (keys: string) => ["commands", "-@all", "keys", keys, "channels", ""];

describe("parseAclUser", () => {
  it("reads back the record the selector carries", () => {
    const record = { grant: "shop/cache", a: { generation: 7, hash: H1 }, b: { generation: 6, hash: H2 } };
    const keys = recordSelector(record)
      .replace(/^\(/, "")
      .replace(/ resetchannels -@all\)$/, "");
    expect(parseAclUser(getUser([selectorOf(keys)]))).toEqual({ flags: ["on", "sanitize-payload"], passwords: [H1], record });
  });

  it("finds no record on a user without the mark, and skips malformed slots", () => {
    expect(parseAclUser(getUser([]))?.record).toEqual({});
    expect(parseAclUser(getUser([selectorOf("~x:* ~_mesh:a:1:" + H1)]))?.record).toEqual({});
    const bad = ["~_mesh:a:0:" + H1, "~_mesh:b:x:" + H2, "~_mesh:a:1:" + H1.slice(1), "~_mesh:b:2:" + H2.toUpperCase(), "~_mesh:c:1:" + H1].join(" ");
    expect(parseAclUser(getUser([selectorOf(`~_mesh:grant:shop/cache ${bad}`)]))?.record).toEqual({ grant: "shop/cache" });
  });

  it("is undefined for a user that does not exist", () => {
    expect(parseAclUser(null)).toBeUndefined();
  });
});
