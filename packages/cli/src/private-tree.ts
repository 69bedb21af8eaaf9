/**
 * The state directory `meshctl up` keeps (`.mesh/`: keys, the admin's `.creds`, the NATS store,
 * bindings, logs) closed to other local users: directories 0700, files 0600. New entries are
 * made so; an existing tree, from an older meshctl that left it 0755/0644, is tightened on the
 * next `up`.
 *
 * Why explicit chmod: the `mode` of `mkdirSync`/`openSync` is masked by the umask (a umask that
 * takes an owner bit leaves a directory the owner cannot enter) and is not applied at all to
 * what exists already.
 */
import { chmodSync, closeSync, fchmodSync, lstatSync, mkdirSync, openSync, readdirSync, statSync, type Stats } from "node:fs";
import { dirname, join } from "node:path";

/** The mode of every directory of the tree. */
export const PRIVATE_DIR_MODE = 0o700;
/** The mode of every file of the tree. */
export const PRIVATE_FILE_MODE = 0o600;
/** Permission bits of the group and of others: none of them may be set in the tree. */
const GROUP_OTHER_BITS = 0o077;
/** The owner's permission bits and setuid, setgid, sticky: what tightening keeps. */
const OWNER_AND_SPECIAL_BITS = 0o7700;

/**
 * Makes directory `dir` with mode 0700, and each missing parent likewise. A directory that
 * exists already is left as it is (tighten a tree it owns with {@link tightenTree}).
 */
export function makePrivateDir(dir: string): void {
  const first = mkdirSync(dir, { recursive: true, mode: PRIVATE_DIR_MODE });
  if (first === undefined) return;
  for (let d = dir; ; d = dirname(d)) {
    chmodSync(d, PRIVATE_DIR_MODE);
    if (d === first || dirname(d) === d) break;
  }
}

/**
 * Opens `file` for appending (a log), made with mode 0600 when missing and set to 0600 when
 * not; returns the descriptor, which the caller closes.
 */
export function openPrivateLog(file: string): number {
  const fd = openSync(file, "a", PRIVATE_FILE_MODE);
  try {
    fchmodSync(fd, PRIVATE_FILE_MODE);
  } catch (e) {
    closeSync(fd);
    throw e;
  }
  return fd;
}

/** What {@link tightenTree} did. */
export interface TightenResult {
  /** Entries that had a group or other permission bit, now cleared. */
  tightened: string[];
  /** Entries of another user, left as they are (only their owner or root may change them). */
  foreign: string[];
}

/**
 * Clears every group and other permission bit in the tree at `root` (`root` included, followed
 * if it is a symlink): a 0755 directory becomes 0700, a 0644 file 0600; the owner's bits stay.
 * Symbolic links below `root` are neither changed nor followed (a link may lead out of the
 * tree, and a link's own mode means nothing), and entries of another user are reported, not
 * touched. Entries that vanish while it walks (a service replacing a binding) are skipped. A
 * missing `root` is an empty tree.
 */
export function tightenTree(root: string, uid: number | undefined = process.getuid?.()): TightenResult {
  const result: TightenResult = { tightened: [], foreign: [] };
  const visit = (path: string, st: Stats) => {
    if (st.isSymbolicLink()) return;
    if (uid !== undefined && st.uid !== uid) {
      result.foreign.push(path);
    } else if ((st.mode & GROUP_OTHER_BITS) !== 0) {
      if (!unlessGone(() => (chmodSync(path, st.mode & OWNER_AND_SPECIAL_BITS), true))) return;
      result.tightened.push(path);
    }
    if (!st.isDirectory()) return;
    for (const name of unlessGone(() => readdirSync(path).sort()) ?? []) {
      const child = join(path, name);
      const cst = unlessGone(() => lstatSync(child));
      if (cst) visit(child, cst);
    }
  };
  const st = unlessGone(() => statSync(root));
  if (st) visit(root, st);
  return result;
}

/** `fn()`, or undefined when what it touches is gone (ENOENT). */
function unlessGone<T>(fn: () => T): T | undefined {
  try {
    return fn();
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw e;
  }
}
