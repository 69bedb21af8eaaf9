/**
 * The JSON Schemas checked in under schemas/ are what the zod schemas of packages/shared
 * generate now, and the portable name pattern they carry accepts exactly the names the mesh
 * accepts.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { NAME_MAX_LENGTH, NAME_PATTERN, NAME_PATTERN_PORTABLE } from "@mesh/shared";
import { SCHEMAS_DIR, SCHEMA_ENTRIES, generateSchemas } from "../scripts/json-schemas.js";

describe("schemas/", () => {
  it("matches the zod schemas (run npm run schemas when it does not)", () => {
    const generated = generateSchemas();
    const onDisk = existsSync(SCHEMAS_DIR) ? readdirSync(SCHEMAS_DIR).filter((f) => f.endsWith(".schema.json")) : [];
    const stale: string[] = [];
    for (const [name, content] of generated) {
      if (!onDisk.includes(name)) stale.push(`${name} is missing`);
      else if (readFileSync(join(SCHEMAS_DIR, name), "utf8") !== content) stale.push(`${name} differs`);
    }
    for (const name of onDisk) if (!generated.has(name)) stale.push(`${name} has no zod schema any more`);
    expect(stale, `schemas/ is out of date: ${stale.join("; ")}. Run npm run schemas and commit the result.`).toEqual([]);
  });

  it("is deterministic: two generations give the same bytes", () => {
    expect([...generateSchemas()]).toEqual([...generateSchemas()]);
  });

  it("has one file per entry, each with its title and the 2020-12 dialect", () => {
    const generated = generateSchemas();
    expect(generated.size).toBe(SCHEMA_ENTRIES.length);
    for (const entry of SCHEMA_ENTRIES) {
      const schema = JSON.parse(generated.get(`${entry.name}.schema.json`)!) as Record<string, unknown>;
      expect(schema.$schema).toBe("https://json-schema.org/draft/2020-12/schema");
      expect(schema.title).toBe(entry.name);
      expect(Object.keys(schema).slice(0, 3)).toEqual(["$schema", "title", "description"]);
    }
  });

  it("carries no look-ahead pattern (Go's and Rust's regex engines have none)", () => {
    for (const [name, content] of generateSchemas()) {
      expect(content.includes("(?="), `${name} contains a look-ahead`).toBe(false);
    }
  });
});

describe("NAME_PATTERN_PORTABLE", () => {
  const portable = new RegExp(NAME_PATTERN_PORTABLE);
  const accepts = (s: string) => portable.test(s) && s.length <= NAME_MAX_LENGTH;

  it.each([
    ["a", true],
    ["shop", true],
    ["pg-main", true],
    ["a1-b2-c3", true],
    ["a".repeat(40), true],
    ["a".repeat(41), false],
    ["", false],
    ["1a", false],
    ["-a", false],
    ["a-", false],
    ["a--b", false],
    ["A", false],
    ["a_b", false],
    ["a.b", false],
    ['x"; DROP ROLE postgres; --', false],
  ])("%j → %s, like NAME_PATTERN", (name, expected) => {
    expect(NAME_PATTERN.test(name)).toBe(expected);
    expect(accepts(name)).toBe(expected);
  });

  it("accepts exactly what NAME_PATTERN accepts", () => {
    // Mostly characters a name may hold, so long valid names and near misses are common.
    const char = fc.oneof({ arbitrary: fc.constantFrom("a", "z", "0", "9", "-"), weight: 9 }, { arbitrary: fc.constantFrom("_", "A", ".", " "), weight: 1 });
    const noisy = fc.array(char, { maxLength: 44, size: "max" }).map((cs) => cs.join(""));
    // Well-formed names of 16 to 61 characters, so the length limit is crossed often.
    const wellFormed = fc
      .tuple(fc.constantFrom("a", "q"), fc.array(fc.tuple(fc.boolean(), fc.constantFrom("b", "7")), { minLength: 15, maxLength: 30 }))
      .map(([head, rest]) => head + rest.map(([dash, c]) => (dash ? "-" : "") + c).join(""));
    fc.assert(
      fc.property(fc.oneof(noisy, wellFormed), (s) => accepts(s) === NAME_PATTERN.test(s)),
      { numRuns: 5_000 },
    );
  });
});
