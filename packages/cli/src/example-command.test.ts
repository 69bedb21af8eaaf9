import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, describe, expect, it } from "vitest";
import { parse } from "yaml";
import { isCliError } from "./cli-error.js";
import { EXAMPLE_SCHEMA, EXAMPLES, examplesHelp, runExample } from "./example-command.js";
import { ExitCodes } from "./exit-codes.js";
import { bufferOutput } from "./output.js";

const examples = new URL("../../../examples/", import.meta.url);
const manifestSchema = new URL("../../../schemas/Manifest.schema.json", import.meta.url);

/** The schema file a manifest's first line (the YAML language server's modeline) names, resolved from `file`. */
function modelineSchema(file: string, text: string): string {
  const m = /^# yaml-language-server: \$schema=(\S+)\n/.exec(text);
  expect(m, `${file} has no modeline`).not.toBeNull();
  return resolve(dirname(file), m![1]!);
}
const dirs: string[] = [];
const emptyDir = () => {
  const d = mkdtempSync(join(tmpdir(), "mesh-example-"));
  dirs.push(d);
  return d;
};
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** The CliError `fn` throws. */
function refusal(fn: () => unknown) {
  try {
    fn();
  } catch (e) {
    if (isCliError(e)) return e;
    throw e;
  }
  throw new Error("no CliError was thrown");
}

describe("meshctl example", () => {
  it("names only files of examples/, each a manifest", () => {
    for (const [name, set] of Object.entries(EXAMPLES)) {
      for (const f of set.files) expect(parse(readFileSync(new URL(f, examples), "utf8")), `${name}: ${f}`).toHaveProperty("kind");
    }
  });

  it("points each example's modeline at the manifest schema, in the repository and where it is written", () => {
    const cwd = emptyDir();
    for (const [name, set] of Object.entries(EXAMPLES)) {
      expect(runExample({ name, cwd }, bufferOutput())).toBe(ExitCodes.Ok);
      for (const f of set.files) {
        const source = fileURLToPath(new URL(f, examples));
        expect(modelineSchema(source, readFileSync(source, "utf8")), f).toBe(fileURLToPath(manifestSchema));
        const written = join(cwd, f);
        expect(modelineSchema(written, readFileSync(written, "utf8")), f).toBe(join(cwd, EXAMPLE_SCHEMA));
      }
    }
    expect(readFileSync(join(cwd, EXAMPLE_SCHEMA), "utf8")).toBe(readFileSync(manifestSchema, "utf8"));
  });

  it("writes shop and the provider it needs at their paths, and says what to run next", () => {
    const cwd = emptyDir();
    const out = bufferOutput();
    expect(runExample({ name: "shop", cwd }, out)).toBe(ExitCodes.Ok);
    // As in the repository, but for the modeline (the test above).
    const body = (text: string) => text.split("\n").slice(1).join("\n");
    for (const f of ["shop.yaml", "providers/postgres.yaml"])
      expect(body(readFileSync(join(cwd, f), "utf8"))).toBe(body(readFileSync(new URL(f, examples), "utf8")));
    expect(out.stdout).toContain(`wrote providers/postgres.yaml\nwrote shop.yaml\nwrote ${EXAMPLE_SCHEMA}\n`);
    expect(out.stdout).toContain("next: npx meshctl up -f providers/postgres.yaml -f shop.yaml\n");
  });

  it("leaves a file that holds the example as it is, and refuses one with other contents, writing nothing, unless --force", () => {
    const cwd = emptyDir();
    writeFileSync(join(cwd, "shop.yaml"), "kind: Module\nname: mine\n");
    const e = refusal(() => runExample({ name: "shop", cwd }, bufferOutput()));
    expect(e.exitCode).toBe(ExitCodes.Failure);
    expect(e.message).toBe(
      "shop.yaml already exists here with other contents; nothing was written. Give --force to overwrite it with the example, or run meshctl example shop in another directory.",
    );
    expect(existsSync(join(cwd, "providers"))).toBe(false);

    const out = bufferOutput();
    expect(runExample({ name: "shop", cwd, force: true }, out)).toBe(ExitCodes.Ok);
    expect(out.stdout).toContain("wrote providers/postgres.yaml\noverwrote shop.yaml\n");
    const again = bufferOutput();
    runExample({ name: "shop", cwd }, again);
    expect(again.stdout).toContain("shop.yaml is already here, unchanged");
  });

  it("lists every example with what it writes, and refuses an unknown one as wrong usage", () => {
    const out = bufferOutput();
    expect(runExample({}, out)).toBe(ExitCodes.Ok);
    for (const name of Object.keys(EXAMPLES)) expect(out.stdout).toContain(`  ${name} `);
    expect(out.stdout).toContain("writes providers/postgres.yaml, shop.yaml");
    expect(examplesHelp()).toBe("shop writes providers/postgres.yaml and shop.yaml; nothing writes nothing.yaml; providers writes providers/*.yaml");
    const e = refusal(() => runExample({ name: "shoe" }, bufferOutput()));
    expect(e.exitCode).toBe(ExitCodes.Usage);
    expect(e.message).toContain("give one of shop, nothing, providers");
  });
});
