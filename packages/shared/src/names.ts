/**
 * Names of modules, parts, requirements, providers and nodes.
 *
 * One rule for all of them, strict on purpose: a name ends up in KV keys, NATS subjects,
 * file paths and SQL identifiers, so it may hold only lower-case letters, digits and
 * single inner hyphens, start with a letter, and be at most 40 characters long.
 * Nothing that passes this check can break out of any of those contexts.
 */
export const NAME_PATTERN = /^[a-z](?:[a-z0-9]|-(?=[a-z0-9])){0,39}$/;

/** What a user is told when a name is refused. */
export const NAME_RULE =
  "must be 1-40 characters of lower-case letters, digits and inner hyphens, starting with a letter";

/** True when `name` may be used as a module, part, requirement, provider or node name. */
export function isValidName(name: string): boolean {
  return NAME_PATTERN.test(name);
}

/** The longest name {@link NAME_PATTERN} accepts. */
export const NAME_MAX_LENGTH = 40;

/**
 * {@link NAME_PATTERN} without look-ahead, for regular-expression engines that have none
 * (Go's RE2, Rust's regex). It accepts the same names when combined with a maximum length
 * of {@link NAME_MAX_LENGTH}; the JSON Schemas in `schemas/` carry it in that form.
 */
export const NAME_PATTERN_PORTABLE = "^[a-z](?:-?[a-z0-9])*$";

/**
 * A binding key: a file name in a requirement's binding directory (servicebinding.io) and the
 * tail of an env name (`DB_HOST`; `inboxPrefix` → `IDENTITY_INBOX_PREFIX`). Every adapter's
 * bindings use only such keys.
 */
export const BINDING_KEY_PATTERN = /^[a-z][A-Za-z0-9_-]*$/;

/**
 * `.<requirement>-g<generation>-<6 random>`: the hidden directory a generation of a binding is
 * written into, which `<requirement>` is a symlink to (see the agent's bindings-writer.ts).
 */
export function bindingGenerationDirPattern(requirement: string): RegExp {
  // Names hold only [a-z0-9-], so the requirement needs no escaping.
  return new RegExp(`^\\.${requirement}-g(\\d+)-[A-Za-z0-9]{6}$`);
}

/** The requirement and generation of a hidden binding directory's name, or undefined for another name. */
export function parseBindingGenerationDir(dir: string): { requirement: string; generation: number } | undefined {
  // The random part holds no '-', so the name parses from the right, whatever '-g' the requirement holds.
  const m = /^\.(.+)-g(\d+)-[A-Za-z0-9]{6}$/.exec(dir);
  return m && isValidName(m[1]!) ? { requirement: m[1]!, generation: Number(m[2]) } : undefined;
}
