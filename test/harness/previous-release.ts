/**
 * The release before this tree, built to run beside it: the CHANGELOG names each release and the
 * commit it was cut from (`## X.Y.Z (date)` and its "the tree of commit <40 hex>" line); the
 * newest is checked out from the repository's own history into a directory of its own and built
 * as a user builds a checkout (`npm ci`, whose `prepare` runs `tsc -b`).
 *
 * Installing one of its services' newer build is what an operator's upgrade does to a unit:
 * the files the unit runs are replaced, then the unit restarted. Here the files are the
 * service's `dist/` under the previous release's checkout, which the previous release's meshctl
 * starts its services from; {@link PreviousRelease.install} points it at this tree's build (or
 * back), and the next start of that program runs it. Node resolves a program's imports from its
 * real path, so a service installed from this tree runs wholly on this tree's packages.
 */
import { execFileSync } from "node:child_process";
import { existsSync, lstatSync, mkdtempSync, readFileSync, renameSync, rmSync, symlinkSync, unlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const repo = fileURLToPath(new URL("../..", import.meta.url));

/** The newest release the CHANGELOG names, and its commit. */
export function previousReleaseOf(changelog: string): { version: string; commit: string } {
  const m = /^## (\d+\.\d+\.\d+) \([^)]*\)\n\nThe [^\n]*?tree of commit ([0-9a-f]{40})/m.exec(changelog);
  if (!m) throw new Error('CHANGELOG.md names no release with its commit ("## X.Y.Z (date)" then "… the tree of commit <40 hex digits>")');
  return { version: m[1]!, commit: m[2]! };
}

export interface PreviousRelease {
  version: string;
  commit: string;
  dir: string;
  /** Its meshctl. */
  meshctl: string;
  /** Makes the program of service `name` (`resolver`, `agent`…) that the previous release's meshctl starts this tree's build (`current`) or its own again. */
  install(name: string, build: "current" | "previous"): void;
  /** Removes its checkout. */
  remove(): void;
}

const git = (...args: string[]) => execFileSync("git", ["-C", repo, ...args], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] }).trim();

/** Checks out and builds the previous release (a few tens of seconds with npm's cache warm). */
export function buildPreviousRelease(): PreviousRelease {
  const { version, commit } = previousReleaseOf(readFileSync(join(repo, "CHANGELOG.md"), "utf8"));
  try {
    git("cat-file", "-e", `${commit}^{commit}`);
  } catch {
    throw new Error(
      `the repository holds no commit ${commit}, which CHANGELOG.md names as release ${version}: a shallow clone? Fetch its history (git fetch --unshallow) and run again`,
    );
  }
  const parent = mkdtempSync(join(tmpdir(), `mesh-release-${version}-`));
  const dir = join(parent, "tree");
  git("worktree", "add", "--detach", dir, commit);
  const remove = () => {
    try {
      git("worktree", "remove", "--force", dir);
    } catch {
      git("worktree", "prune");
    }
    rmSync(parent, { recursive: true, force: true });
  };
  try {
    execFileSync("npm", ["ci", "--no-audit", "--no-fund", "--loglevel=error"], { cwd: dir, stdio: ["ignore", "pipe", "pipe"], timeout: 600_000 });
  } catch (e) {
    remove();
    throw new Error(`building release ${version} (commit ${commit}) with npm ci failed: ${String((e as { stderr?: Buffer }).stderr ?? e)}`, { cause: e });
  }
  return {
    version,
    commit,
    dir,
    meshctl: join(dir, "packages/cli/bin/meshctl.js"),
    install(name, build) {
      const at = join(dir, "services", name, "dist");
      const own = `${at}.${version}`;
      if (!existsSync(own)) renameSync(at, own);
      if (lstatSync(at, { throwIfNoEntry: false })) unlinkSync(at);
      symlinkSync(build === "current" ? join(repo, "services", name, "dist") : own, at);
    },
    remove,
  };
}
