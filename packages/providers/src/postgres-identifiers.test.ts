import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { ErrorCodes, isMeshError } from "@mesh/shared";
import { MAX_BASE_LENGTH, PG_IDENTIFIER, baseName, checkIdentifier, loginRoleName, postgresNames, quoteIdentifier } from "./postgres-identifiers.js";
import { checkGrantRef } from "./grant-ref.js";
import { meshName } from "../../../test/harness/arbitraries.js";
import { refused } from "../../../test/harness/refusals.js";

const INJECTION = 'x"; DROP ROLE postgres; --';

const refusedName = (fn: () => unknown) => refused(ErrorCodes.InvalidName, fn);

describe("baseName", () => {
  it.each([
    ["shop", "db", "shop_db"],
    ["shop", "session-key", "shop_session_key"],
    ["my-shop", "db", "my__shop_db"],
    ["a-b", "c", "a__b_c"],
    ["a", "b-c", "a_b_c"],
    ["pgx", "db", "pgx_db"],
  ])("%s/%s → %s", (module, requirement, expected) => {
    expect(baseName(module, requirement)).toBe(expected);
  });

  it("truncates long names with a hash, staying unique and short enough for the role suffix", () => {
    const a = baseName("m".repeat(40), `${"r".repeat(39)}a`);
    const b = baseName("m".repeat(40), `${"r".repeat(39)}b`);
    expect(a).not.toBe(b);
    expect(a).toHaveLength(MAX_BASE_LENGTH);
    expect(a).toMatch(/^m{36}___[0-9a-f]{16}$/);
    expect(loginRoleName(a, 2).length).toBeLessThanOrEqual(63);
  });

  it("refuses names that PostgreSQL reserves (pg_…), saying to rename the module", () => {
    expect(refusedName(() => baseName("pg", "db"))).toMatch(/reserves .*pg_.*rename the module/);
    expect(() => baseName("pg-main", "db")).toThrow(/pg_/);
  });

  it("refuses the injection name as module or requirement", () => {
    expect(refusedName(() => baseName(INJECTION, "db"))).toContain("refused");
    refusedName(() => baseName("shop", INJECTION));
    refusedName(() => postgresNames(INJECTION, "db"));
  });

  it("maps every pair of mesh names to a valid identifier", () => {
    fc.assert(
      fc.property(meshName, meshName, (module, requirement) => {
        fc.pre(!/^pg(-|$)/.test(module));
        const names = postgresNames(module, requirement);
        for (const n of [names.group, names.database, ...names.logins]) expect(n).toMatch(PG_IDENTIFIER);
        expect(names.group.length).toBeLessThanOrEqual(MAX_BASE_LENGTH);
      }),
    );
  });

  it("is one-to-one: distinct grants get distinct names", () => {
    fc.assert(
      fc.property(meshName, meshName, meshName, meshName, (m1, r1, m2, r2) => {
        fc.pre(!/^pg(-|$)/.test(m1) && !/^pg(-|$)/.test(m2) && (m1 !== m2 || r1 !== r2));
        expect(baseName(m1, r1)).not.toBe(baseName(m2, r2));
      }),
    );
    // The collisions a plain `-` → `_` mapping would have:
    expect(baseName("a-b", "c")).not.toBe(baseName("a", "b-c"));
    const long = "x".repeat(36);
    expect(baseName(long, "r".repeat(30))).not.toBe(baseName(`${long}-y`, "r".repeat(28)));
  });
});

describe("loginRoleName", () => {
  it.each([
    [1, "shop_db_a"],
    [2, "shop_db_b"],
    [3, "shop_db_a"],
    [10, "shop_db_b"],
  ])("generation %i → %s", (generation, expected) => {
    expect(loginRoleName("shop_db", generation)).toBe(expected);
  });
});

describe("checkIdentifier and quoteIdentifier", () => {
  it.each(["postgres", "shop_db", "_x", "a".repeat(63)])("accepts %s and quotes it", (name) => {
    expect(checkIdentifier(name)).toBe(name);
    expect(quoteIdentifier(name)).toBe(`"${name}"`);
  });

  it.each([INJECTION, "", "Shop", "1abc", "a-b", "a b", 'a"b', "a;b", "a".repeat(64), "ümlaut", "a\0b"])("refuses %j", (name) => {
    refusedName(() => checkIdentifier(name));
    refusedName(() => quoteIdentifier(name));
  });

  it("says what is refused and what is allowed", () => {
    expect(refusedName(() => quoteIdentifier(INJECTION, "role name"))).toMatch(/role name .* refused: .*lower-case letters, digits and _/);
  });

  it("never yields an unescaped quote, whatever the input", () => {
    const quotedSafely = /^"(?:[^"]|"")*"$/;
    fc.assert(
      fc.property(fc.oneof(fc.string(), fc.stringMatching(PG_IDENTIFIER), fc.constantFrom(INJECTION, '""', 'a"')), (s) => {
        let quoted: string;
        try {
          quoted = quoteIdentifier(s);
        } catch (e) {
          expect(isMeshError(e, ErrorCodes.InvalidName)).toBe(true);
          return;
        }
        expect(quoted).toMatch(quotedSafely);
        expect(quoted.slice(1, -1).replaceAll('""', "")).not.toContain('"');
      }),
    );
  });
});

describe("checkGrantRef", () => {
  it("accepts a valid grant", () => {
    expect(() => checkGrantRef({ module: "shop", requirement: "db", generation: 1 })).not.toThrow();
    expect(() => checkGrantRef({ module: "shop", requirement: "db" })).not.toThrow();
  });

  it.each([
    [{ module: INJECTION, requirement: "db", generation: 1 }, ErrorCodes.InvalidName],
    [{ module: "shop", requirement: INJECTION, generation: 1 }, ErrorCodes.InvalidName],
    [{ module: "Shop", requirement: "db", generation: 1 }, ErrorCodes.InvalidName],
    [{ module: "shop", requirement: "db", generation: 0 }, ErrorCodes.InvalidRequest],
    [{ module: "shop", requirement: "db", generation: 1.5 }, ErrorCodes.InvalidRequest],
  ])("refuses %j with %s", (grant, code) => {
    refused(code, () => checkGrantRef(grant));
  });
});
