/**
 * PostgreSQL names of a grant, and the quoting of identifiers.
 *
 * Every identifier is validated against {@link PG_IDENTIFIER} *and* quoted: either alone would
 * stop injection; both together survive a mistake in one of them.
 */
import { ErrorCodes, MeshError } from "@mesh/shared";
import { grantBaseName } from "./grant-base-name.js";
import { slotName } from "./alternating.js";

/** The identifiers the adapter accepts: lower case, digits and `_`, at most 63 bytes (NAMEDATALEN-1). */
export const PG_IDENTIFIER = /^[a-z_][a-z0-9_]{0,62}$/;

/** Longest base name; leaves room for the `_a`/`_b` suffix of the login roles. */
export const MAX_BASE_LENGTH = 55;

/** Throws MeshError `InvalidName` unless `name` matches {@link PG_IDENTIFIER}; returns `name`. */
export function checkIdentifier(name: string, what = "identifier"): string {
  if (typeof name !== "string" || !PG_IDENTIFIER.test(name)) {
    throw new MeshError(
      ErrorCodes.InvalidName,
      `PostgreSQL ${what} ${JSON.stringify(name)} is refused: it must be 1-63 characters of lower-case letters, digits and _, not starting with a digit`,
    );
  }
  return name;
}

/**
 * `name` as a quoted SQL identifier (`"name"`, embedded quotes doubled), after
 * {@link checkIdentifier}; throws MeshError `InvalidName` for anything else.
 */
export function quoteIdentifier(name: string, what?: string): string {
  return `"${checkIdentifier(name, what).replaceAll('"', '""')}"`;
}

/**
 * The base name of a grant's PostgreSQL objects: the group role and the database.
 *
 * `<module>_<requirement>` (`shop/db` → `shop_db`), one-to-one over all valid mesh names: a
 * hyphen in the requirement becomes `_`, a hyphen in the module `__`, so the first single `_`
 * always separates the two (`a-b/c` → `a__b_c`, `a/b-c` → `a_b_c`). A name longer than
 * {@link MAX_BASE_LENGTH} keeps its first 36 characters, then `___` (which no untruncated name
 * contains) and 16 hex digits of the SHA-256 of `module/requirement`.
 * Throws MeshError `InvalidName` for a result PostgreSQL reserves (`pg_…`).
 */
export function baseName(module: string, requirement: string): string {
  const base = grantBaseName(module, requirement, MAX_BASE_LENGTH);
  if (base.startsWith("pg_")) {
    throw new MeshError(
      ErrorCodes.InvalidName,
      `module ${JSON.stringify(module)} would own PostgreSQL roles named ${base}…, and PostgreSQL reserves role names starting with pg_; rename the module`,
    );
  }
  return checkIdentifier(base, "base name");
}

/** The login role of `generation`: `<base>_a` for odd generations, `<base>_b` for even ones. */
export function loginRoleName(base: string, generation: number): string {
  return checkIdentifier(slotName(base, generation), "role name");
}

/** All PostgreSQL names of a grant. */
export interface PostgresNames {
  /** NOLOGIN role that owns the database and every object in it. */
  group: string;
  database: string;
  /** Both login roles, generation-odd first. */
  logins: readonly [string, string];
}

/** The names of the grant `module/requirement` (see {@link baseName}). */
export function postgresNames(module: string, requirement: string): PostgresNames {
  const base = baseName(module, requirement);
  return { group: base, database: base, logins: [loginRoleName(base, 1), loginRoleName(base, 2)] };
}
