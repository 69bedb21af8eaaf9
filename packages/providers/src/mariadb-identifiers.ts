/**
 * MariaDB names of a grant, and the quoting of identifiers.
 *
 * Every identifier is validated against {@link MARIADB_IDENTIFIER} *and* quoted with
 * backticks: either alone would stop injection; both together survive a mistake in one of them.
 * Limits measured on MariaDB 10.11: database names at most 64 characters, user names at most
 * 128 (80 before 10.6); {@link MAX_BASE_LENGTH} keeps every name within 64, so both fit.
 */
import { ErrorCodes, MeshError } from "@mesh/shared";
import { grantBaseName } from "./grant-base-name.js";
import { slotName } from "./alternating.js";

/** The identifiers the adapter accepts: lower case, digits and `_`, at most 64 characters. */
export const MARIADB_IDENTIFIER = /^[a-z_][a-z0-9_]{0,63}$/;

/** Longest base name; leaves room for the `_a`/`_b` suffix of the users within 64 characters. */
export const MAX_BASE_LENGTH = 62;

/** The database that holds the mesh's marks on what it made (see mariadb.ts). */
export const META_DATABASE = "mesh_meta";

/** Databases a grant must never be given: the server's own, and the mesh's marks. */
const RESERVED_DATABASES = new Set(["information_schema", "performance_schema", "mysql", "sys", META_DATABASE]);

/** Throws MeshError `InvalidName` unless `name` matches {@link MARIADB_IDENTIFIER}; returns `name`. */
export function checkIdentifier(name: string, what = "identifier"): string {
  if (typeof name !== "string" || !MARIADB_IDENTIFIER.test(name)) {
    throw new MeshError(
      ErrorCodes.InvalidName,
      `MariaDB ${what} ${JSON.stringify(name)} is refused: it must be 1-64 characters of lower-case letters, digits and _, not starting with a digit`,
    );
  }
  return name;
}

/**
 * `name` as a quoted identifier (`` `name` ``, embedded backticks doubled), after
 * {@link checkIdentifier}; throws MeshError `InvalidName` for anything else.
 */
export function quoteIdentifier(name: string, what?: string): string {
  return `\`${checkIdentifier(name, what).replaceAll("`", "``")}\``;
}

/** The host part of every account the mesh makes: any client address. */
export const ACCOUNT_HOST = "%";

/** The account `` `user`@`%` `` of user `name`, quoted (see {@link quoteIdentifier}). */
export function quoteAccount(name: string): string {
  return `${quoteIdentifier(name, "user name")}@\`${ACCOUNT_HOST}\``;
}

/**
 * The base name of a grant's MariaDB objects, which is also its database: the mapping of
 * {@link grantBaseName} with at most {@link MAX_BASE_LENGTH} characters. Throws MeshError
 * `InvalidName` for a result the server or the mesh reserves (`information_schema`,
 * `performance_schema`, `mesh_meta`).
 */
export function baseName(module: string, requirement: string): string {
  const base = grantBaseName(module, requirement, MAX_BASE_LENGTH);
  if (RESERVED_DATABASES.has(base)) {
    throw new MeshError(
      ErrorCodes.InvalidName,
      `requirement ${module}/${requirement} would own the MariaDB database ${base}, which the server or the mesh reserves; rename the module or the requirement`,
    );
  }
  return checkIdentifier(base, "base name");
}

/** The user of `generation`: `<base>_a` for odd generations, `<base>_b` for even ones. */
export function loginUserName(base: string, generation: number): string {
  return checkIdentifier(slotName(base, generation), "user name");
}

/** All MariaDB names of a grant. */
export interface MariadbNames {
  database: string;
  /** Both users, generation-odd first. */
  users: readonly [string, string];
}

/** The names of the grant `module/requirement` (see {@link baseName}). */
export function mariadbNames(module: string, requirement: string): MariadbNames {
  const base = baseName(module, requirement);
  return { database: base, users: [loginUserName(base, 1), loginUserName(base, 2)] };
}
