import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { formatFileProblems, loadManifestFiles, locateDocument, manifestFilesIn, nodesOfParts, processReader, type FileReader } from "./manifest-files.js";

const provider = "kind: Provider\nname: pg-main\nserves: [postgres.database]\nnode: node-a\nendpoint: postgres://127.0.0.1:5432\n";
const shop = [
  "kind: Module",
  "name: shop",
  "parts:",
  "  - { name: api, node: node-a }",
  "  - { name: worker, node: node-b, installed: false }",
  "requires:",
  "  - { name: db, kind: postgres.database, parts: [api] }",
].join("\n");

function reader(files: Record<string, string>, stdin = ""): FileReader {
  return {
    async readFile(path) {
      const text = files[path];
      if (text === undefined) throw Object.assign(new Error(`ENOENT: ${path}`), { code: "ENOENT" });
      return text;
    },
    readStdin: async () => stdin,
  };
}

describe("loadManifestFiles", () => {
  it("reads every file and standard input", async () => {
    const r = await loadManifestFiles(["p.yaml", "-"], reader({ "p.yaml": provider }, shop));
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.files.map((f) => [f.source, f.documents.map((d) => `${d.kind}/${d.name}`)])).toEqual([
      ["p.yaml", ["Provider/pg-main"]],
      ["<stdin>", ["Module/shop"]],
    ]);
    expect(nodesOfParts(r.files)).toEqual(["node-a", "node-b"]);
  });

  it("lists every problem of every file as FILE: document N: path: message", async () => {
    const bad =
      "kind: Module\nname: shop\nparts: [{ name: api, node: node-a }]\nrequires:\n  - { name: db, parts: [api] }\n---\nkind: Provider\nname: Bad_Name\n";
    const r = await loadManifestFiles(["ok.yaml", "bad.yaml", "gone.yaml"], reader({ "ok.yaml": provider, "bad.yaml": bad }));
    expect(r.ok).toBe(false);
    if (r.ok) return;
    const text = formatFileProblems(r.problems);
    expect(text).toContain("bad.yaml: document 0: requires[0].kind: required");
    expect(text).toContain("bad.yaml: document 1: name: must be 1-40 characters");
    expect(text).toContain("bad.yaml: document 1: serves: required");
    expect(text).toContain("gone.yaml: cannot read: no such file");
    expect(text).not.toContain("ok.yaml");
  });

  it("refuses the same document defined in two files", async () => {
    const r = await loadManifestFiles(["a.yaml", "b.yaml"], reader({ "a.yaml": shop, "b.yaml": `${provider}---\n${shop}` }));
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(formatFileProblems(r.problems)).toBe("b.yaml: document 1: name: Module/shop is also defined by a.yaml document 0");
  });

  it("asks for a file when none is given", async () => {
    const r = await loadManifestFiles([], reader({}));
    expect(r.ok ? "" : formatFileProblems(r.problems)).toContain("no file given");
  });
});

describe("locateDocument", () => {
  it("maps an index across the files sent together back to its file", () => {
    const files = [
      { source: "a", documents: [{}, {}] },
      { source: "b", documents: [{}] },
    ] as unknown as Parameters<typeof locateDocument>[0];
    expect(locateDocument(files, 0)).toEqual({ source: "a", document: 0 });
    expect(locateDocument(files, 1)).toEqual({ source: "a", document: 1 });
    expect(locateDocument(files, 2)).toEqual({ source: "b", document: 0 });
    expect(locateDocument(files, 7)).toEqual({ source: "a, b", document: 7 });
  });
});

describe("-f DIR", () => {
  it("reads the .yaml and .yml files directly in it, sorted by name, and nothing else", async () => {
    const dir = mkdtempSync(join(tmpdir(), "manifests-"));
    try {
      writeFileSync(join(dir, "b-shop.yml"), shop);
      writeFileSync(join(dir, "a-provider.yaml"), provider);
      writeFileSync(join(dir, "notes.txt"), "not a manifest");
      writeFileSync(join(dir, ".#a-provider.yaml"), "an editor's lock file");
      mkdirSync(join(dir, "nested.yaml"));
      mkdirSync(join(dir, "sub"));
      writeFileSync(join(dir, "sub", "c.yaml"), "kind: Module\nname: deeper\n");
      expect(await manifestFilesIn(dir)).toEqual([join(dir, "a-provider.yaml"), join(dir, "b-shop.yml")]);
      expect(await manifestFilesIn(join(dir, "a-provider.yaml"))).toBeUndefined();
      const r = await loadManifestFiles([dir], processReader);
      expect(r.ok && r.files.map((f) => [f.source, f.documents.map((d) => d.name)])).toEqual([
        [join(dir, "a-provider.yaml"), ["pg-main"]],
        [join(dir, "b-shop.yml"), ["shop"]],
      ]);
      const empty = await loadManifestFiles([join(dir, "sub", "..", "nested.yaml")], processReader);
      expect(empty).toEqual({
        ok: false,
        problems: [
          { source: join(dir, "sub", "..", "nested.yaml"), message: "is a directory with no .yaml or .yml file directly in it (subdirectories are not read)" },
        ],
      });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
