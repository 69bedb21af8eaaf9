/**
 * Rules of the code's shape that neither the compiler nor `npm run lint` checks:
 *
 * - Every read-modify-write of a KV record goes through casModify
 *   (packages/shared/src/kv-records.ts), whose write is casUpdate: a plain
 *   `kv.update(key, data, revision)` is not a compare-and-set on a cluster of nats-server
 *   2.9.10, and updates written that way were lost there.
 * - Each workspace's package.json lists exactly the packages its source imports (or resolves,
 *   as meshctl resolves the services it starts): nothing missing (it would work only while
 *   another workspace hoists it) and nothing unused (the SDK would install what it never loads).
 * - The SDK loads neither pino nor the YAML parser: it imports `@mesh/shared`'s pure entry and
 *   its NATS runtime, not the services' logger; the YAML parser is loaded only when `declare`
 *   is handed a file's text.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { build, type Metafile } from "esbuild";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const root = fileURLToPath(new URL("..", import.meta.url));
/** The one file that may call a KV handle's own `update`, and this one, whose examples show what is looked for. */
const ALLOWED = new Set(["packages/shared/src/kv-records.ts", "test/structure.test.ts"]);

/** Every TypeScript file of the repository's own code and tests. */
function sources(): string[] {
  const out: string[] = [];
  const walk = (dir: string) => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      if (e.name === "node_modules" || e.name === "dist" || e.name.startsWith(".")) continue;
      const p = join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else if (/\.(ts|mts|tsx)$/.test(e.name) && !e.name.endsWith(".d.ts")) out.push(p);
    }
  };
  for (const top of ["packages", "services", "test", "bench", "scripts"]) walk(join(root, top));
  return out;
}

/**
 * A call of a KV handle's `update`: a receiver named `kv` or reached through one (`this.kv`,
 * `store.kv.grants`, `bucketKv`), or any `update(key, data, …revision)` of three arguments
 * whose last names a revision. Comments are not code.
 */
function kvUpdateCalls(text: string): string[] {
  const code = text.replace(/\/\*[\s\S]*?\*\//g, "").replace(/(^|[^:])\/\/.*$/gm, "$1");
  const found = code.match(/\b\w*kv\w*(?:\.\w+)*\.update\s*\(|\.update\s*\([^(),]+,[^(),]+,[^()]*revision[^()]*\)/gi) ?? [];
  return found.map((m) => m.trim());
}

/** The packages `text` imports, re-exports or resolves (`import.meta.resolve`) by bare name (`pino`, `@nats-io/kv`), Node's own left out. */
function importedPackages(text: string): string[] {
  const names = new Set<string>();
  const statements = /^\s*(?:import|export)\s[^;]*?\sfrom\s*"([^"]+)"|^\s*import\s*"([^"]+)"|\bimport(?:\.meta\.resolve)?\(\s*"([^"]+)"\s*\)/gm;
  for (const m of text.matchAll(statements)) {
    const spec = (m[1] ?? m[2] ?? m[3])!;
    if (spec.startsWith("node:") || spec.startsWith(".")) continue;
    const parts = spec.split("/");
    names.add(spec.startsWith("@") ? `${parts[0]}/${parts[1]}` : parts[0]!);
  }
  return [...names];
}

/** Each workspace (the root package.json's list) with its own package.json. */
function workspacePackages(): Array<{ workspace: string; pkg: { name: string; dependencies?: Record<string, string>; exports?: Record<string, unknown> } }> {
  const rootPkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { workspaces: string[] };
  return rootPkg.workspaces.map((workspace) => ({ workspace, pkg: JSON.parse(readFileSync(join(root, workspace, "package.json"), "utf8")) as never }));
}

/** The workspaces and, for each, the packages its source (tests and fixtures left out) imports and the ones its package.json lists. */
function workspaceDependencies(): Array<{ workspace: string; imported: string[]; listed: string[] }> {
  return workspacePackages().map(({ workspace, pkg }) => {
    const imported = new Set<string>();
    const walk = (dir: string) => {
      for (const e of readdirSync(dir, { withFileTypes: true })) {
        const p = join(dir, e.name);
        if (e.isDirectory()) walk(p);
        else if (/\.ts$/.test(e.name) && !/\.test\.ts$|^test-fixtures\.ts$/.test(e.name))
          for (const n of importedPackages(readFileSync(p, "utf8"))) imported.add(n);
      }
    };
    walk(join(root, workspace, "src"));
    imported.delete(pkg.name);
    // A package a listed dependency asks for as its peer is listed too (the tracing SDK's @opentelemetry/api).
    const listed = Object.keys(pkg.dependencies ?? {});
    for (const dep of listed) {
      const peers = (JSON.parse(readFileSync(join(root, "node_modules", dep, "package.json"), "utf8")) as { peerDependencies?: Record<string, string> })
        .peerDependencies;
      for (const peer of Object.keys(peers ?? {})) if (listed.includes(peer)) imported.add(peer);
    }
    return { workspace, imported: [...imported].sort(), listed: listed.sort() };
  });
}

/**
 * Bundles `entry` for Node, split at its dynamic imports, and returns the input files of what
 * importing it loads (the entry's chunk and the chunks it imports statically) and of the
 * chunks only a dynamic import loads.
 */
async function bundleInputs(entry: string): Promise<{ onImport: string[]; onDemand: string[] }> {
  const outdir = mkdtempSync(join(tmpdir(), "mesh-bundle-"));
  try {
    const r = await build({ entryPoints: [entry], bundle: true, splitting: true, platform: "node", format: "esm", outdir, metafile: true, logLevel: "silent" });
    const outputs: Metafile["outputs"] = r.metafile.outputs;
    const entryOut = Object.keys(outputs).find((o) => outputs[o]!.entryPoint !== undefined)!;
    const loaded = new Set<string>();
    const visit = (o: string) => {
      if (loaded.has(o)) return;
      loaded.add(o);
      for (const i of outputs[o]!.imports) if (i.kind === "import-statement" && outputs[i.path]) visit(i.path);
    };
    visit(entryOut);
    const inputsOf = (os: string[]) => [...new Set(os.flatMap((o) => Object.keys(outputs[o]!.inputs)))];
    return { onImport: inputsOf([...loaded]), onDemand: inputsOf(Object.keys(outputs).filter((o) => !loaded.has(o))) };
  } finally {
    rmSync(outdir, { recursive: true, force: true });
  }
}

const packageOf = (input: string) => /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(input)?.[1];

describe("the code's shape", () => {
  it("reads the packages a file imports or resolves, Node's own and relative paths left out", () => {
    const text =
      'import { z } from "zod";\nimport type { KV } from "@nats-io/kv";\nimport { join } from "node:path";\nimport { x } from "./x.js";\nconst y = await import("pino");\nexport { w } from "yaml/dist/index.js";\nconst msg = `loaded from "somewhere else"`;\n' +
      'const main = import.meta.resolve("@mesh/agent/main");';
    expect(importedPackages(text).sort()).toEqual(["@mesh/agent", "@nats-io/kv", "pino", "yaml", "zod"]);
  });

  it("lists in each workspace's package.json exactly the packages its source imports", () => {
    const wrong = workspaceDependencies()
      .map(({ workspace, imported, listed }) => ({
        workspace,
        unlisted: imported.filter((n) => !listed.includes(n)),
        unused: listed.filter((n) => !imported.includes(n)),
      }))
      .filter((w) => w.unlisted.length > 0 || w.unused.length > 0);
    expect(wrong, "add what is imported to the workspace's dependencies, and remove what no source file imports").toEqual([]);
  });

  it("recognises a KV update in the forms it is written in", () => {
    expect(kvUpdateCalls("await kv.update(key, data, cur.revision);")).toHaveLength(1);
    expect(kvUpdateCalls("this.kv.update(k, data, e.revision)")).toHaveLength(1);
    expect(kvUpdateCalls("store.kv.grants.update(key, JSON.stringify(g), rev)")).toHaveLength(1);
    expect(kvUpdateCalls("bucket.update(key, data, r.revision)")).toHaveLength(1);
    expect(kvUpdateCalls('createHash("sha256").update(part).digest("hex")')).toHaveLength(0);
    expect(kvUpdateCalls("await jsm.streams.update(stream, changes);")).toHaveLength(0);
    expect(kvUpdateCalls("await records.update(key, (r) => r)")).toHaveLength(0);
    expect(kvUpdateCalls("// kv.update(key, data, revision) is not a compare-and-set")).toHaveLength(0);
  });

  it("writes a changed KV record only through casModify's compare-and-set, never a plain kv.update", () => {
    const offenders = sources()
      .map((p) => ({ file: relative(root, p), calls: kvUpdateCalls(readFileSync(p, "utf8")) }))
      .filter((f) => !ALLOWED.has(f.file) && f.calls.length > 0);
    expect(offenders, "use casModify (or casWrite) from @mesh/shared: a plain kv.update loses updates on a cluster").toEqual([]);
  });

  it("keeps pino and the YAML parser out of the SDK: yaml is loaded only for a manifest's text", async () => {
    const { onImport, onDemand } = await bundleInputs(join(root, "packages/client/dist/index.js"));
    const loaded = new Set(onImport.map(packageOf));
    // What it does load, so that a bundle that failed to take anything in cannot pass.
    expect(loaded.has("@nats-io/jetstream") && loaded.has("zod")).toBe(true);
    expect(onImport.some((i) => i.includes("packages/shared/dist/runtime.js"))).toBe(true);
    expect(loaded.has("pino"), "the SDK imports @mesh/shared/service (the services' logger)").toBe(false);
    expect(loaded.has("yaml"), "the SDK imports @mesh/shared/manifest-text outside declare's text path").toBe(false);
    expect(onDemand.map(packageOf)).toContain("yaml");
    expect(onDemand.map(packageOf)).not.toContain("pino");
  });

  it("resolves every entry of every workspace package to its sources, in vitest and in the processes tests start with tsx", () => {
    // An entry missing from either map resolves to the build instead: two copies of one module, each with its own state
    // (a tracer provider registered in one, spans made in the other, and nothing exported).
    const entries = workspacePackages().flatMap(({ pkg }) => Object.keys(pkg.exports ?? {}).map((e) => (e === "." ? pkg.name : `${pkg.name}/${e.slice(2)}`)));
    expect(entries).toContain("@mesh/shared/runtime");
    const vitestConfig = readFileSync(join(root, "vitest.config.ts"), "utf8");
    const sources = JSON.parse(readFileSync(join(root, "test/harness/tsconfig.sources.json"), "utf8")) as {
      compilerOptions: { paths: Record<string, string[]> };
    };
    expect(
      entries.filter((e) => !vitestConfig.includes(`"${e}":`)),
      "add these to vitest.config.ts's aliases",
    ).toEqual([]);
    expect(
      entries.filter((e) => !sources.compilerOptions.paths[e]),
      "add these to test/harness/tsconfig.sources.json's paths",
    ).toEqual([]);
  });

  it("keeps @mesh/shared's pure entry pure: no connection, no logger, no YAML", async () => {
    const { onImport } = await bundleInputs(join(root, "packages/shared/dist/index.js"));
    const loaded = new Set(onImport.map(packageOf));
    expect(loaded.has("zod")).toBe(true);
    for (const p of ["pino", "yaml", "@nats-io/transport-node", "@nats-io/kv", "@opentelemetry/api"]) expect(loaded.has(p), p).toBe(false);
  });
});
