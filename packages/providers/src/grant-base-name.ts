/**
 * The name a grant's objects take on a backend whose identifiers allow `[a-z0-9_]` only (SQL
 * roles, users, databases), before the backend's own length and reserved-name rules.
 */
import { createHash } from "node:crypto";

/** Length of the hash part of a shortened base name: `___` and 16 hex digits. */
const HASH_SUFFIX_LENGTH = 19;

/**
 * `<module>_<requirement>` (`shop/db` → `shop_db`), one-to-one over all valid mesh names: a
 * hyphen in the requirement becomes `_`, a hyphen in the module `__`, so the first single `_`
 * always separates the two (`a-b/c` → `a__b_c`, `a/b-c` → `a_b_c`). A result longer than
 * `maxLength` keeps its first `maxLength - 19` characters, then `___` (which no unshortened
 * name contains, as mesh names have no doubled or outer hyphens) and 16 hex digits of the
 * SHA-256 of `module/requirement`. Callers validate the names first and the result after.
 */
export function grantBaseName(module: string, requirement: string, maxLength: number): string {
  const base = `${module.replaceAll("-", "__")}_${requirement.replaceAll("-", "_")}`;
  if (base.length <= maxLength) return base;
  const digest = createHash("sha256").update(`${module}/${requirement}`).digest("hex");
  return `${base.slice(0, maxLength - HASH_SUFFIX_LENGTH)}___${digest.slice(0, 16)}`;
}
