/**
 * The words of the operator's ceiling on `nats.user` permissions, as a provider's document
 * writes them (`options.allowPublish`, `options.allowSubscribe`): what an entry may say and
 * what applies when the document says nothing. Checking a requirement against a ceiling is
 * nats-permissions.ts's; control-plane.ts writes the
 * bootstrap provider's ceiling with these.
 */
import { moduleSubjectPattern } from "./subjects.js";

/** Stands for the module of the requirement in a ceiling pattern: `app.{module}.>`, `events.{module}.*`. */
export const MODULE_PLACEHOLDER = "{module}";

/** The provider options that set the ceiling, per permission list. */
export const CeilingOptions = { publish: "allowPublish", subscribe: "allowSubscribe" } as const;

/**
 * The provider option naming the modules whose `nats.user` requirements may ask for
 * `allowResponses` (a module name, a list of them, or `*` for every module); unset: none.
 */
export const RESPONSES_CEILING_OPTION = "allowResponses";
/** Every module, in {@link RESPONSES_CEILING_OPTION}. */
export const EVERY_MODULE = "*";

/**
 * A ceiling as a provider's document writes it, per list: entries `[<module>:]<pattern>`, a
 * subject pattern in which `{module}` stands for the requirement's module, applying to every
 * module or, scoped, to that one alone (`billing:orders.>`).
 */
export interface NatsCeiling {
  publish: readonly string[];
  subscribe: readonly string[];
  /** The modules whose requirements may ask for `allowResponses` ({@link RESPONSES_CEILING_OPTION}); absent or empty: none. */
  responses?: readonly string[];
}

/** A ceiling entry that applies to module `module` alone: `billing:orders.>`. */
export function scopedToModule(module: string, pattern: string): string {
  return `${module}:${pattern}`;
}

/** A ceiling entry's module scope (absent: every module) and pattern; the inverse of {@link scopedToModule}. */
export function parseCeilingEntry(entry: string): { module?: string; pattern: string } {
  const at = entry.indexOf(":");
  return at < 0 ? { pattern: entry } : { module: entry.slice(0, at), pattern: entry.slice(at + 1) };
}

/** Every module's own namespace as a ceiling pattern, from the one definition of it: `app.{module}.>`. */
const OWN_NAMESPACE = moduleSubjectPattern("module").replace("module", MODULE_PLACEHOLDER);

/**
 * The ceiling of a provider whose document sets none: each module its own namespace. A grant's
 * own inbox is no part of a ceiling: the mesh adds it to every identity, and no ceiling or
 * requirement can reach another's (nats-permissions.ts).
 */
export const DEFAULT_NATS_CEILING: NatsCeiling = { publish: [OWN_NAMESPACE], subscribe: [OWN_NAMESPACE] };
