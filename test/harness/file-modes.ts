/** What another local user could open in a directory tree, read with lstat as the kernel sees it. */
import { lstatSync, readdirSync, type Stats } from "node:fs";
import { join } from "node:path";

/**
 * Entries under `root` (itself included) with a group or other permission bit, as
 * `<path below root> <mode>` (`/` for `root`); symlinks aside (their own mode means nothing
 * and they are not followed), and entries replaced while the walk runs (a binding's older
 * generation) skipped.
 */
export function entriesOpenToOthers(root: string): string[] {
  const open: string[] = [];
  const walk = (p: string) => {
    let st: Stats;
    let names: string[] = [];
    try {
      st = lstatSync(p);
      if (st.isDirectory()) names = readdirSync(p);
    } catch {
      return;
    }
    if (st.isSymbolicLink()) return;
    if (st.mode & 0o077) open.push(`${p.slice(root.length) || "/"} ${(st.mode & 0o777).toString(8)}`);
    for (const n of names.sort()) walk(join(p, n));
  };
  walk(root);
  return open;
}
