/**
 * The JSON Schemas checked in under schemas/ are what the zod schemas of packages/shared
 * generate now, and the portable name pattern they carry accepts exactly the names the mesh
 * accepts.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { fileURLToPath } from "node:url";
import fc from "fast-check";
import { Ajv2020 } from "ajv/dist/2020.js";
import { parseAllDocuments } from "yaml";
import { KIND_LIST, NAME_MAX_LENGTH, NAME_PATTERN, NAME_PATTERN_PORTABLE, requirementOptionNames, validateDocuments } from "@mesh/shared";
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

  it("has one file per entry, each with its id, title and the 2020-12 dialect", () => {
    const generated = generateSchemas();
    expect(generated.size).toBe(SCHEMA_ENTRIES.length);
    for (const entry of SCHEMA_ENTRIES) {
      const schema = JSON.parse(generated.get(`${entry.name}.schema.json`)!) as Record<string, unknown>;
      expect(schema.$schema).toBe("https://json-schema.org/draft/2020-12/schema");
      expect(schema.title).toBe(entry.name);
      expect(Object.keys(schema).slice(0, 4)).toEqual(["$schema", "$id", "title", "description"]);
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

/** Paths of the properties below `node` that carry no description, through items, unions and conditionals. */
function undescribed(node: unknown, path = ""): string[] {
  if (node === null || typeof node !== "object") return [];
  const n = node as Record<string, unknown>;
  const missing: string[] = [];
  for (const [name, field] of Object.entries((n.properties ?? {}) as Record<string, Record<string, unknown>>)) {
    // A conditional's `then` repeats a property to narrow it; its description is where it is declared.
    if (!field.description && !path.includes("then")) missing.push(`${path}${name}`);
    missing.push(...undescribed(field, `${path}${name}.`));
  }
  if (n.items) missing.push(...undescribed(n.items, `${path.replace(/\.$/, "")}[].`));
  for (const key of ["anyOf", "oneOf", "allOf"]) for (const sub of (n[key] ?? []) as unknown[]) missing.push(...undescribed(sub, path));
  if (n.then) missing.push(...undescribed(n.then, `${path}then.`));
  return missing;
}

describe("what an editor explains", () => {
  const schema = (name: string) => JSON.parse(generateSchemas().get(`${name}.schema.json`)!) as Record<string, unknown>;
  const ajv = new Ajv2020({ allErrors: true, strict: false });
  const manifest = ajv.compile(schema("Manifest"));
  const exampleFiles = (dir: string): string[] =>
    readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
      e.isDirectory() ? exampleFiles(join(dir, e.name)) : e.name.endsWith(".yaml") ? [join(dir, e.name)] : [],
    );

  it.each(["ModuleDoc", "ProviderDoc", "Manifest", "CredentialValues"])("describes every property of %s, options of every kind included", (name) => {
    expect(undescribed(schema(name))).toEqual([]);
  });

  it("gives every schema a $id of its own", () => {
    const ids = SCHEMA_ENTRIES.map((e) => schema(e.name).$id);
    expect(ids.every((id) => typeof id === "string" && id.startsWith("urn:mesh:schema:v1:"))).toBe(true);
    expect(new Set(ids).size).toBe(ids.length);
  });

  it("accepts every document of every example file, as the mesh does", () => {
    const files = exampleFiles(fileURLToPath(new URL("../examples/", import.meta.url)));
    expect(files.length).toBeGreaterThan(5);
    for (const file of files) {
      const docs = parseAllDocuments(readFileSync(file, "utf8")).map((d) => d.toJS() as unknown);
      expect(validateDocuments(docs).ok, file).toBe(true);
      for (const doc of docs) expect(manifest(doc) ? [] : manifest.errors, file).toEqual([]);
    }
  });

  const module = (requirement: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({
    kind: "Module",
    name: "shop",
    parts: [{ name: "api", node: "node-a" }],
    requires: [{ name: "r", ...requirement }],
    ...extra,
  });
  it.each([
    ["an option of another kind", module({ kind: "nats.user", options: { history: 3 } }), "/requires/0/options"],
    ["an option misspelt", module({ kind: "kv.bucket", options: { histroy: 3 } }), "/requires/0/options"],
    ["a value out of range", module({ kind: "kv.bucket", options: { history: 100 } }), "/requires/0/options/history"],
    ["options on a kind that takes none", module({ kind: "postgres.database", options: { publish: "x" } }), "/requires/0/options"],
    ["a subject list of numbers", module({ kind: "nats.user", options: { publish: [1] } }), "/requires/0/options/publish"],
    ["an apiVersion this mesh does not read", module({ kind: "secret" }, { apiVersion: "mesh/v2" }), "/apiVersion"],
  ])("refuses %s where the mistake is", (_what, doc, where) => {
    expect(manifest(doc)).toBe(false);
    expect(manifest.errors!.map((e) => e.instancePath)).toContain(where);
  });

  it("accepts each kind's own options, and apiVersion mesh/v1", () => {
    for (const doc of [
      module({ kind: "nats.user", options: { publish: "app.shop.>", subscribe: ["app.shop.>", "app.other.events"], allowResponses: true } }),
      module({ kind: "kv.bucket", options: { history: 5, ttl: "30d", maxBytes: 1024, replicas: 1 } }),
      module({ kind: "object.store", options: { ttl: "2h" } }, { apiVersion: "mesh/v1" }),
    ]) {
      expect(manifest(doc) ? [] : manifest.errors).toEqual([]);
      expect(validateDocuments([doc]).ok).toBe(true);
    }
  });

  it("lists in each kind's options exactly what its adapter accepts", () => {
    for (const kind of KIND_LIST) {
      const requires = (
        schema("ModuleDoc").properties as Record<
          string,
          { items: { allOf: Array<{ if: unknown; then: { properties: { options: { properties?: object } } } }> } }
        >
      ).requires!;
      const branch = requires.items.allOf.find((b) => JSON.stringify(b.if).includes(`"${kind}"`))!;
      expect(Object.keys(branch.then.properties.options.properties ?? {}), kind).toEqual([...requirementOptionNames(kind)].sort());
    }
  });
});
