import { chmodSync, closeSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { makePrivateDir, openPrivateLog, tightenTree } from "./private-tree.js";
import { closeStateDir } from "./up-command.js";
import { upPaths } from "./paths.js";
import { bufferOutput } from "./output.js";
import { entriesOpenToOthers } from "../../../test/harness/file-modes.js";

const dir = mkdtempSync(join(tmpdir(), "meshctl-private-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const modeOf = (p: string) => lstatSync(p).mode & 0o777;

/** A state directory as an older meshctl left it: 0755 directories, 0644 files. */
function looseTree(root: string): void {
  for (const d of ["logs", "nats-operator/store/jetstream", "bindings/node-a/shop/.api.generations/db-g1-abc"]) mkdirSync(join(root, d), { recursive: true });
  for (const f of ["logs/resolver.log", "nats-url", "nats-operator/store/jetstream/meta.inf", "bindings/node-a/shop/.api.generations/db-g1-abc/password"])
    writeFileSync(join(root, f), "x");
  mkdirSync(join(root, "bindings/node-a/shop/api"), { recursive: true });
  symlinkSync("../.api.generations/db-g1-abc", join(root, "bindings/node-a/shop/api/db"));
  const walk = (p: string) => {
    const st = lstatSync(p);
    if (st.isSymbolicLink()) return;
    chmodSync(p, st.isDirectory() ? 0o755 : 0o644);
    if (st.isDirectory()) for (const n of readdirSync(p)) walk(join(p, n));
  };
  walk(root);
}

describe("makePrivateDir", () => {
  it("makes the directory and every missing parent 0700, whatever the umask takes away", () => {
    const old = process.umask(0o277); // would leave 0500: a directory its owner cannot write
    try {
      makePrivateDir(join(dir, "fresh/a/b"));
    } finally {
      process.umask(old);
    }
    for (const d of ["fresh", "fresh/a", "fresh/a/b"]) expect(modeOf(join(dir, d)).toString(8), d).toBe("700");
  });

  it("leaves a directory that exists as it is", () => {
    mkdirSync(join(dir, "theirs"), { mode: 0o755 });
    chmodSync(join(dir, "theirs"), 0o755);
    makePrivateDir(join(dir, "theirs"));
    expect(modeOf(join(dir, "theirs")).toString(8)).toBe("755");
  });
});

describe("openPrivateLog", () => {
  it("makes a log 0600, and sets one an older meshctl made 0644 to 0600", () => {
    closeSync(openPrivateLog(join(dir, "new.log")));
    expect(modeOf(join(dir, "new.log")).toString(8)).toBe("600");
    writeFileSync(join(dir, "old.log"), "kept\n", { mode: 0o644 });
    chmodSync(join(dir, "old.log"), 0o644);
    const fd = openPrivateLog(join(dir, "old.log"));
    writeFileSync(fd, "appended\n");
    closeSync(fd);
    expect(modeOf(join(dir, "old.log")).toString(8)).toBe("600");
    expect(statSync(join(dir, "old.log")).size).toBe("kept\nappended\n".length);
  });
});

describe("tightenTree", () => {
  it("clears every group and other bit of a tree an older meshctl left 0755/0644, and says what it changed", () => {
    const root = join(dir, "old-mesh");
    looseTree(root);
    expect(entriesOpenToOthers(root).length).toBeGreaterThan(10);
    const r = tightenTree(root);
    expect(entriesOpenToOthers(root)).toEqual([]);
    expect(r.foreign).toEqual([]);
    expect(r.tightened).toContain(root);
    expect(r.tightened).toContain(join(root, "logs/resolver.log"));
    expect(modeOf(join(root, "logs")).toString(8)).toBe("700");
    expect(modeOf(join(root, "nats-url")).toString(8)).toBe("600");
    // Done: a second pass changes nothing.
    expect(tightenTree(root)).toEqual({ tightened: [], foreign: [] });
  });

  it("keeps the owner's bits, and neither follows nor changes a symlink that leads out of the tree", () => {
    const root = join(dir, "links");
    mkdirSync(root);
    writeFileSync(join(dir, "outside.txt"), "not the mesh's");
    chmodSync(join(dir, "outside.txt"), 0o644);
    mkdirSync(join(dir, "outside-dir"));
    writeFileSync(join(dir, "outside-dir/f"), "");
    chmodSync(join(dir, "outside-dir/f"), 0o644);
    symlinkSync(join(dir, "outside.txt"), join(root, "to-file"));
    symlinkSync(join(dir, "outside-dir"), join(root, "to-dir"));
    writeFileSync(join(root, "script"), "", { mode: 0o755 });
    chmodSync(join(root, "script"), 0o755);
    writeFileSync(join(root, "read-only"), "");
    chmodSync(join(root, "read-only"), 0o444);
    tightenTree(root);
    expect(modeOf(join(dir, "outside.txt")).toString(8)).toBe("644");
    expect(modeOf(join(dir, "outside-dir/f")).toString(8)).toBe("644");
    expect(modeOf(join(root, "script")).toString(8)).toBe("700");
    expect(modeOf(join(root, "read-only")).toString(8)).toBe("400");
  });

  it("reports another user's entries and leaves them alone; a missing root is an empty tree", () => {
    const root = join(dir, "shared");
    mkdirSync(join(root, "sub"), { recursive: true });
    chmodSync(join(root, "sub"), 0o755);
    const mine = process.getuid!();
    // As if meshctl ran as another user: everything here is foreign to it.
    expect(tightenTree(root, mine + 1)).toEqual({ tightened: [], foreign: [root, join(root, "sub")] });
    expect(modeOf(join(root, "sub")).toString(8)).toBe("755");
    expect(tightenTree(join(dir, "no-such-dir"))).toEqual({ tightened: [], foreign: [] });
  });
});

describe("closeStateDir (meshctl up, before it starts anything)", () => {
  it("makes .mesh, its logs and bindings 0700, and tightens what an older meshctl left open, saying so", () => {
    const cwd = join(dir, "up-new");
    mkdirSync(cwd);
    const out = bufferOutput();
    closeStateDir(upPaths({ cwd }), out);
    expect(readdirSync(join(cwd, ".mesh")).sort()).toEqual(["bindings", "logs"]);
    expect(entriesOpenToOthers(join(cwd, ".mesh"))).toEqual([]);
    expect(out.stdout).toBe("");

    const older = join(dir, "up-old");
    looseTree(join(older, ".mesh"));
    const again = bufferOutput();
    closeStateDir(upPaths({ cwd: older }), again);
    expect(entriesOpenToOthers(join(older, ".mesh"))).toEqual([]);
    expect(again.stdout).toMatch(/^closed \d+ entries under .*\.mesh\/ to other local users \(directories 0700, files 0600\)/);
  });

  it("makes a bindings root outside .mesh 0700 when it is missing, and leaves one that exists as it is", () => {
    const cwd = join(dir, "up-bindings");
    mkdirSync(join(cwd, "existing"), { recursive: true });
    chmodSync(join(cwd, "existing"), 0o755);
    closeStateDir(upPaths({ cwd, bindings: "existing" }), bufferOutput());
    expect(modeOf(join(cwd, "existing")).toString(8)).toBe("755");
    closeStateDir(upPaths({ cwd, bindings: "made/here" }), bufferOutput());
    expect(modeOf(join(cwd, "made")).toString(8)).toBe("700");
    expect(modeOf(join(cwd, "made/here")).toString(8)).toBe("700");
  });
});
