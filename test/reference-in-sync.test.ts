/**
 * The generated reference pages (docs/reference/manifest-fields.md, meshctl-options.md) are what
 * the manifest schemas and meshctl's command definitions generate now, and name every field and
 * every command.
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { visibleCommands } from "../packages/cli/src/program.js";
import { REPO_ROOT, generateReference } from "../scripts/reference-docs.js";

describe("docs/reference", () => {
  it("matches the schemas and meshctl's definitions (run npm run reference when it does not)", () => {
    const stale: string[] = [];
    for (const [path, content] of generateReference()) {
      const file = join(REPO_ROOT, path);
      if (!existsSync(file)) stale.push(`${path} is missing`);
      else if (readFileSync(file, "utf8") !== content) stale.push(`${path} differs`);
    }
    expect(stale, `the generated reference is out of date: ${stale.join("; ")}. Run npm run reference and commit the result.`).toEqual([]);
  });

  it("is deterministic: two generations give the same bytes", () => {
    expect([...generateReference()]).toEqual([...generateReference()]);
  });

  it("has a section for every meshctl command, and every field of both documents with a meaning", () => {
    const pages = generateReference();
    const options = pages.get("docs/reference/meshctl-options.md")!;
    for (const cmd of visibleCommands()) expect(options, cmd.name()).toContain(`## meshctl ${cmd.name()}\n`);
    const fields = pages.get("docs/reference/manifest-fields.md")!;
    for (const path of ["name", "serves", "admin.passwordFile", "preference", "parts[].onRotate", "requires[].deletionPolicy", "requires[].rotate.every"]) {
      const row = fields.split("\n").find((l) => l.startsWith(`| \`${path}\` |`));
      expect(row, path).toBeDefined();
      // The last cell, the meaning, is not empty: every field carries a description in the schema.
      expect(row!.split(" | ").at(-1)!.replace(/\|$/, "").trim(), path).not.toBe("");
    }
  });
});
