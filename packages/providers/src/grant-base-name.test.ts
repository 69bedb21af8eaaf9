import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { meshName } from "../../../test/harness/arbitraries.js";
import { grantBaseName } from "./grant-base-name.js";
import { MAX_BASE_LENGTH as PG_MAX, baseName as postgresBaseName } from "./postgres-identifiers.js";

describe("grantBaseName", () => {
  it.each([
    ["shop", "db", 62, /^shop_db$/],
    ["my-shop", "session-key", 62, /^my__shop_session_key$/],
    ["m".repeat(40), "r".repeat(40), 62, /^m{40}_rr___[0-9a-f]{16}$/],
    ["m".repeat(40), "r".repeat(40), 55, /^m{36}___[0-9a-f]{16}$/],
  ])("%s/%s at most %i characters → %s", (module, requirement, max, expected) => {
    expect(grantBaseName(module, requirement, max)).toMatch(expected);
  });

  it("is one-to-one and within the limit for every limit a backend uses", () => {
    for (const max of [55, 62]) {
      fc.assert(
        fc.property(meshName, meshName, meshName, meshName, (m1, r1, m2, r2) => {
          fc.pre(m1 !== m2 || r1 !== r2);
          const a = grantBaseName(m1, r1, max);
          expect(a.length).toBeLessThanOrEqual(max);
          expect(a).not.toBe(grantBaseName(m2, r2, max));
        }),
      );
    }
  });

  it("gives PostgreSQL's base names at PostgreSQL's limit, so that module can use it", () => {
    fc.assert(
      fc.property(meshName, meshName, (module, requirement) => {
        fc.pre(!/^pg(-|$)/.test(module));
        expect(grantBaseName(module, requirement, PG_MAX)).toBe(postgresBaseName(module, requirement));
      }),
    );
  });
});
