import { describe, expect, it } from "vitest";
import { parse } from "yaml";
import { bufferOutput } from "./output.js";
import { OutputFormats, formatOf, formatted, outputOption } from "./output-format.js";

describe("formatOf", () => {
  it("takes -o over --json, and leaves the human form when neither is given", () => {
    expect(formatOf({ output: "yaml", json: true })).toBe("yaml");
    expect(formatOf({ output: "json" })).toBe("json");
    expect(formatOf({ json: true })).toBe("json");
    expect(formatOf({})).toBeUndefined();
    expect(formatOf({ output: "wide", json: true })).toBe("wide");
    expect(formatOf({ output: "name" })).toBe("name");
  });

  it("offers a command the formats it takes, and says what each prints", () => {
    expect(outputOption().argChoices).toEqual(["json", "yaml"]);
    const all = outputOption(OutputFormats);
    expect(all.argChoices).toEqual(["json", "yaml", "wide", "name"]);
    expect(all.description).toBe("print as json, yaml, wide (a table with more columns) or name (<kind>/<name>, one a line) (--json is -o json)");
  });
});

describe("formatted", () => {
  it("passes the human form and JSON through as they are", () => {
    for (const format of [undefined, "json"] as const) {
      const out = bufferOutput({ isTTY: true });
      const f = formatted(out, format);
      expect(f.json).toBe(format === "json");
      f.out.out('{"a":1}');
      f.done();
      expect(out.stdout).toBe('{"a":1}\n');
      expect(f.out).toBe(out);
    }
  });

  it("writes the JSON a command printed as the same document in YAML, once it is done", () => {
    const out = bufferOutput({ isTTY: true });
    const f = formatted(out, "yaml");
    expect(f.json).toBe(true);
    // A document, not a screen: the command is told it writes to no terminal.
    expect(f.out.isTTY).toBe(false);
    const doc = {
      modules: [{ name: "shop", state: "Ready", grants: [{ id: "shop/db", generation: 2, holders: { "node-a/api": { generation: 2 } } }] }],
      note: "a: b # c",
    };
    f.out.out(JSON.stringify(doc, null, 2));
    expect(out.stdout).toBe("");
    f.out.err("meshctl: a warning");
    expect(out.stderr).toBe("meshctl: a warning\n");
    f.done();
    expect(parse(out.stdout)).toEqual(doc);
  });

  it("writes text that is not one JSON document as it came, and nothing for nothing", () => {
    const out = bufferOutput();
    const f = formatted(out, "yaml");
    f.out.out("not json");
    f.done();
    expect(out.stdout).toBe("not json\n");
    const quiet = bufferOutput();
    formatted(quiet, "yaml").done();
    expect(quiet.stdout).toBe("");
  });
});
