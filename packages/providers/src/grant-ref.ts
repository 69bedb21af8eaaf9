/**
 * The check every adapter applies to the grant a request names, before it talks to any
 * backend: a name that reaches an adapter has passed the manifest schema already, but an
 * adapter must not rely on that (defense in depth).
 */
import { ErrorCodes, MeshError, NAME_RULE, isValidName } from "@mesh/shared";
import type { GrantRef } from "./adapter.js";

/**
 * Throws MeshError `InvalidName` unless module and requirement are valid mesh names, and
 * `InvalidRequest` unless a given generation is a positive integer. Returns nothing.
 */
export function checkGrantRef(grant: Omit<GrantRef, "generation"> & { generation?: number }): void {
  for (const [what, value] of [
    ["module", grant.module],
    ["requirement", grant.requirement],
  ] as const) {
    if (typeof value !== "string" || !isValidName(value)) {
      throw new MeshError(ErrorCodes.InvalidName, `${what} name ${JSON.stringify(value)} is refused: it ${NAME_RULE}`);
    }
  }
  if (grant.generation !== undefined && !(Number.isSafeInteger(grant.generation) && grant.generation >= 1)) {
    throw new MeshError(
      ErrorCodes.InvalidRequest,
      `generation ${String(grant.generation)} of ${grant.module}/${grant.requirement} is invalid: generations are 1, 2, 3 …`,
    );
  }
}
