/**
 * The words of the operator's ceiling on `nats.user` permissions, as a provider's document
 * writes them (`options.allowPublish`, `options.allowSubscribe`): what an entry may say and
 * what applies when the document says nothing. Checking a requirement against a ceiling is
 * the nats.user adapter's (@mesh/providers, nats-permissions.ts); control-plane.ts writes the
 * bootstrap provider's ceiling with these.
 */
import { moduleSubjectPattern } from "./subjects.js";

/** Subscribed by every `nats.user` grant, so its requests get their replies: always within a ceiling. */
export const INBOX_PATTERN = "_INBOX.>";

/** Stands for the module of the requirement in a ceiling pattern: `app.{module}.>`, `events.{module}.*`. */
export const MODULE_PLACEHOLDER = "{module}";

/** The provider options that set the ceiling, per permission list. */
export const CeilingOptions = { publish: "allowPublish", subscribe: "allowSubscribe" } as const;

/**
 * A ceiling as a provider's document writes it, per list: entries `[<module>:]<pattern>`, a
 * subject pattern in which `{module}` stands for the requirement's module, applying to every
 * module or, scoped, to that one alone (`billing:orders.>`).
 */
export interface NatsCeiling {
  publish: readonly string[];
  subscribe: readonly string[];
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

/** The ceiling of a provider whose document sets none: each module its own namespace, and its inbox to subscribe to. */
export const DEFAULT_NATS_CEILING: NatsCeiling = { publish: [OWN_NAMESPACE], subscribe: [OWN_NAMESPACE, INBOX_PATTERN] };
