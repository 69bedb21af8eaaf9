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
export const NAME_RULE = "must be 1-40 characters of lower-case letters, digits and inner hyphens, starting with a letter";

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
 * tail of an env name (`DB_HOST`; `inboxPrefix` → `IDENTITY_INBOX_PREFIX`; `tls.crt` →
 * `CERT_TLS_CRT`). Every adapter's bindings use only such keys. A dot may only stand between two
 * other characters (`tls.crt`, servicebinding.io's TLS layout), so no key is `.`, `..` or hidden.
 */
export const BINDING_KEY_PATTERN = /^[a-z][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+)*$/;

/**
 * Where a part's bindings lie under a bindings root (the agent's bindings-writer.ts writes them):
 *
 *     <root>/<module>/<part>/<binding>              one entry per binding, nothing else (SERVICE_BINDING_ROOT)
 *     <root>/<module>/<part>.env                    every key of every binding, for process managers
 *     <root>/<module>/.<part>.generations/          the generation directories the bindings are symlinks to
 *
 * Names hold only [a-z0-9-], so `<part>.env` and `.<part>.generations` never clash with a part.
 */
export function bindingGenerationsDirName(part: string): string {
  return `.${part}.generations`;
}

/** The env file of part `part`, beside its bindings directory: `<part>.env`. */
export function partEnvFileName(part: string): string {
  return `${part}.env`;
}

/**
 * `<binding>-g<generation>-<6 random>`: a generation's directory in the part's
 * {@link bindingGenerationsDirName} directory, which `<part>/<binding>` is a symlink to.
 */
export function bindingGenerationDirPattern(binding: string): RegExp {
  // Names hold only [a-z0-9-], so the binding needs no escaping.
  return new RegExp(`^${binding}-g(\\d+)-[A-Za-z0-9]{6}$`);
}

/**
 * The binding and generation of a generation directory's name, or undefined for another name.
 * Also takes the hidden `.<binding>-g<generation>-<6 random>` that agents before the
 * generations directory wrote inside the part's directory.
 */
export function parseBindingGenerationDir(dir: string): { requirement: string; generation: number } | undefined {
  // The random part holds no '-', so the name parses from the right, whatever '-g' the binding holds.
  const m = /^\.?(.+)-g(\d+)-[A-Za-z0-9]{6}$/.exec(dir);
  return m && isValidName(m[1]!) ? { requirement: m[1]!, generation: Number(m[2]) } : undefined;
}

/** The control plane's module name. */
export const CONTROL_PLANE_MODULE = "mesh";

/** The binding directory a part's identity is written to, beside its requirements' bindings. */
export const IDENTITY_BINDING = "identity";
/** True for a requirement name only the mesh may use: `identity` and `identity-…`. */
export function isReservedRequirementName(name: string): boolean {
  return name === IDENTITY_BINDING || name.startsWith(`${IDENTITY_BINDING}-`);
}
