/**
 * Rules of the code's shape that a compiler does not check. Every read-modify-write of a KV
 * record goes through casModify (packages/shared/src/kv-records.ts), whose write is casUpdate:
 * a plain `kv.update(key, data, revision)` is not a compare-and-set on a cluster of
 * nats-server 2.9.10, and updates written that way were lost there.
 */
import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
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

describe("the code's shape", () => {
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
});
