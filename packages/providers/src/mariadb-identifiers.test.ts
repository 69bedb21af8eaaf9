import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { ErrorCodes, isMeshError } from "@mesh/shared";
import { meshName } from "../../../test/harness/arbitraries.js";
import { refused } from "../../../test/harness/refusals.js";
import {
  MARIADB_IDENTIFIER,
  MAX_BASE_LENGTH,
  baseName,
  checkIdentifier,
  loginUserName,
  mariadbNames,
  quoteAccount,
  quoteIdentifier,
} from "./mariadb-identifiers.js";

const INJECTION = 'x"; DROP ROLE postgres; --';

const refusedName = (fn: () => unknown) => refused(ErrorCodes.InvalidName, fn);

describe("mariadbNames", () => {
  it.each([
    ["shop", "db", "shop_db", "shop_db_a", "shop_db_b"],
    ["my-shop", "db", "my__shop_db", "my__shop_db_a", "my__shop_db_b"],
    ["a", "b-c", "a_b_c", "a_b_c_a", "a_b_c_b"],
    ["pg", "db", "pg_db", "pg_db_a", "pg_db_b"],
  ])("%s/%s → database %s, users %s and %s", (module, requirement, database, a, b) => {
    expect(mariadbNames(module, requirement)).toEqual({ database, users: [a, b] });
  });

  it("keeps the longest names within 64 characters, users included", () => {
    const names = mariadbNames("m".repeat(40), "r".repeat(40));
    expect(names.database).toHaveLength(MAX_BASE_LENGTH);
    expect(names.database).toMatch(/^m{40}_r{2}___[0-9a-f]{16}$/);
    for (const u of names.users) expect(u.length).toBeLessThanOrEqual(64);
  });

  it("maps every pair of mesh names to valid identifiers", () => {
    fc.assert(
      fc.property(meshName, meshName, (module, requirement) => {
        const names = mariadbNames(module, requirement);
        for (const n of [names.database, ...names.users]) expect(n).toMatch(MARIADB_IDENTIFIER);
      }),
    );
  });

  it.each([
    ["information", "schema"],
    ["performance", "schema"],
    ["mesh", "meta"],
  ])("refuses %s/%s: the server or the mesh reserves that database", (module, requirement) => {
    expect(refusedName(() => baseName(module, requirement))).toMatch(/reserves.*rename the module or the requirement/);
  });

  it("refuses the injection name as module or requirement", () => {
    expect(refusedName(() => baseName(INJECTION, "db"))).toContain("refused");
    refusedName(() => mariadbNames("shop", INJECTION));
  });
});

describe("loginUserName", () => {
  it.each([
    [1, "shop_db_a"],
    [2, "shop_db_b"],
    [3, "shop_db_a"],
    [10, "shop_db_b"],
  ])("generation %i → %s", (generation, expected) => {
    expect(loginUserName("shop_db", generation)).toBe(expected);
  });
});

describe("checkIdentifier, quoteIdentifier and quoteAccount", () => {
  it.each(["shop_db", "_x", "a".repeat(64)])("accepts %s and quotes it", (name) => {
    expect(checkIdentifier(name)).toBe(name);
    expect(quoteIdentifier(name)).toBe(`\`${name}\``);
    expect(quoteAccount(name)).toBe(`\`${name}\`@\`%\``);
  });

  it.each([INJECTION, "", "Shop", "1abc", "a-b", "a b", "a`b", "a'b", "a@b", "a;b", "a".repeat(65), "ümlaut", "a\0b"])("refuses %j", (name) => {
    refusedName(() => checkIdentifier(name));
    refusedName(() => quoteIdentifier(name));
    refusedName(() => quoteAccount(name));
  });

  it("says what is refused and what is allowed", () => {
    expect(refusedName(() => quoteIdentifier(INJECTION, "user name"))).toMatch(/MariaDB user name .* refused: .*lower-case letters, digits and _/);
  });

  it("never yields an unescaped backtick, whatever the input", () => {
    fc.assert(
      fc.property(fc.oneof(fc.string(), fc.stringMatching(MARIADB_IDENTIFIER), fc.constantFrom(INJECTION, "``", "a`")), (s) => {
        let quoted: string;
        try {
          quoted = quoteIdentifier(s);
        } catch (e) {
          expect(isMeshError(e, ErrorCodes.InvalidName)).toBe(true);
          return;
        }
        expect(quoted.slice(1, -1).replaceAll("``", "")).not.toContain("`");
      }),
    );
  });
});
