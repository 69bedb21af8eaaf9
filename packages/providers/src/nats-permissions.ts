/**
 * What a `nats.user` identity may do, as pure functions: the subject patterns it may publish
 * and subscribe to, from its requirement's options, validated against a strict pattern before
 * they go into a user JWT (nats-user.ts); and the ceiling the operator sets on the provider,
 * which every requirement it serves must stay within.
 */
import {
  CeilingOptions,
  DEFAULT_NATS_CEILING,
  ErrorCodes,
  INBOX_PATTERN,
  MODULE_PLACEHOLDER,
  MeshError,
  moduleSubjectPattern,
  parseCeilingEntry,
  isValidName,
  type NatsCeiling,
  type ProviderOptions,
  type RequirementOptions,
} from "@mesh/shared";
import { uncovered } from "./subject-containment.js";

export { INBOX_PATTERN };

/** Longest subject pattern, and most patterns in one list, that a requirement may ask for. */
export const MAX_SUBJECT_LENGTH = 255;
export const MAX_SUBJECTS = 64;

/** One subject token that is not a wildcard: letters, digits, `_`, `-` and `$` (for `$JS`, `$KV`). */
const SUBJECT_TOKEN = /^[A-Za-z0-9_$-]+$/;

export const SUBJECT_RULE =
  "must be dot-separated tokens of letters, digits, _, - and $, where a token may also be * and the last one >, at most 255 characters";

/** Throws MeshError `InvalidRequest` unless `subject` is a subject pattern per {@link SUBJECT_RULE}; returns it. */
export function checkSubjectPattern(subject: unknown, what: string): string {
  const bad = () => new MeshError(ErrorCodes.InvalidRequest, `${what} ${JSON.stringify(subject)} is refused: a subject ${SUBJECT_RULE}`);
  if (typeof subject !== "string" || subject.length === 0 || subject.length > MAX_SUBJECT_LENGTH) throw bad();
  const tokens = subject.split(".");
  tokens.forEach((t, i) => {
    if (t === "*" || (t === ">" && i === tokens.length - 1)) return;
    if (!SUBJECT_TOKEN.test(t)) throw bad();
  });
  return subject;
}

/** What an identity may do; replies to the requests it receives are always allowed, so it can answer them. */
export interface NatsPermissions {
  /** Subject patterns it may publish to; empty: none. */
  publish: string[];
  /** Subject patterns it may subscribe to; always includes {@link INBOX_PATTERN}. */
  subscribe: string[];
  /** Subject patterns it may not publish to even where `publish` allows them (the server's deny wins); absent: none. */
  denyPublish?: string[];
}

/** The allow lists, which a provider's ceiling bounds. */
const PERMISSION_OPTIONS = ["publish", "subscribe"] as const;
/** What only narrows an allow list: no ceiling bounds it. */
const DENY_OPTION = "denyPublish";

/**
 * The permissions of a `nats.user` grant of `module` from its requirement's options:
 * `publish` and `subscribe`, each a subject pattern or a list of them, default to the module's
 * own namespace ({@link moduleSubjectPattern}); `_INBOX.>` is added to `subscribe` so request
 * and reply work. Throws MeshError `InvalidRequest`, naming the option, for an unknown option,
 * a value that is not a string or list of strings, too many patterns, or a refused pattern.
 */
export function natsPermissions(module: string, options: RequirementOptions = {}): NatsPermissions {
  const accepted: readonly string[] = [...PERMISSION_OPTIONS, DENY_OPTION];
  for (const key of Object.keys(options)) {
    if (!accepted.includes(key)) {
      throw new MeshError(
        ErrorCodes.InvalidRequest,
        `requirement option ${JSON.stringify(key)} is not one of nats.user's (${accepted.join(", ")}); remove it or fix its name`,
      );
    }
  }
  const list = (key: (typeof PERMISSION_OPTIONS)[number] | typeof DENY_OPTION): string[] => {
    const v = options[key];
    if (v === undefined) return key === DENY_OPTION ? [] : [moduleSubjectPattern(module)];
    const values = typeof v === "string" ? [v] : v;
    if (!Array.isArray(values)) {
      throw new MeshError(ErrorCodes.InvalidRequest, `requirement option ${key} must be a subject pattern or a list of them, not ${JSON.stringify(v)}`);
    }
    if (values.length > MAX_SUBJECTS) {
      throw new MeshError(ErrorCodes.InvalidRequest, `requirement option ${key} lists ${values.length} subjects; at most ${MAX_SUBJECTS} are accepted`);
    }
    return [...new Set(values.map((s) => checkSubjectPattern(s, `subject in requirement option ${key}`)))];
  };
  const subscribe = list("subscribe");
  const deny = list(DENY_OPTION);
  return { publish: list("publish"), subscribe: subscribe.includes(INBOX_PATTERN) ? subscribe : [...subscribe, INBOX_PATTERN], ...(deny.length ? { denyPublish: deny } : {}) };
}

/** One pattern a requirement asks for that its provider's ceiling does not allow. */
export interface CeilingBreach {
  list: (typeof PERMISSION_OPTIONS)[number];
  pattern: string;
  /** A subject the pattern reaches and the ceiling does not. */
  example: string;
  /** The pattern reaches that far only through {@link subscribeReach}. */
  widened?: true;
}

/**
 * What a subscribe permission lets its holder receive on nats-server 2.9.10: a permission whose
 * last token is `*` also lets it subscribe with `>` there (the server matches a subscription's
 * wildcards against the allow list as if they were tokens: seen here, a user allowed `*`
 * subscribed to `>` and received `deep.a.b.c`, one allowed `events.m.*` received
 * `events.m.a.b`). So that is what a ceiling is checked against. Publishing has no such gap: a
 * published subject has no wildcards.
 */
export function subscribeReach(pattern: string): string {
  return pattern === "*" || pattern.endsWith(".*") ? `${pattern.slice(0, -1)}>` : pattern;
}

const withModule = (pattern: string, module: string) => pattern.split(MODULE_PLACEHOLDER).join(module);

/**
 * The ceiling of provider `provider` from its options `allowPublish` and `allowSubscribe`, each a
 * pattern or a list ({@link NatsCeiling}; unset: {@link DEFAULT_NATS_CEILING}). Throws MeshError
 * `ProviderMisconfigured`, naming the option and the entry, for an entry whose scope is not a
 * module name or whose pattern is not a subject pattern once `{module}` is filled in.
 */
export function natsCeiling(provider: string, options: ProviderOptions = {}): NatsCeiling {
  const list = (key: keyof NatsCeiling): readonly string[] => {
    const option = CeilingOptions[key];
    const v = options[option];
    if (v === undefined) return DEFAULT_NATS_CEILING[key];
    const entries = typeof v === "string" ? [v] : v;
    for (const entry of entries) {
      const { module, pattern } = parseCeilingEntry(entry);
      const bad = (why: string) =>
        new MeshError(ErrorCodes.ProviderMisconfigured, `provider ${provider}: options.${option} entry ${JSON.stringify(entry)} ${why}; fix the provider's document`);
      if (module !== undefined && !isValidName(module)) throw bad("is scoped to something that is not a module name (write <module>:<pattern>, e.g. billing:orders.>)");
      try {
        checkSubjectPattern(withModule(pattern, "m"), "pattern");
      } catch {
        throw bad(`is not a subject pattern: a subject ${SUBJECT_RULE}, where ${MODULE_PLACEHOLDER} stands for the module`);
      }
    }
    return entries;
  };
  return { publish: list("publish"), subscribe: list("subscribe") };
}

/**
 * The ceiling's patterns for `module`: entries scoped to another module left out, `{module}`
 * filled in; subscribing to {@link INBOX_PATTERN} is always allowed, as every user gets it.
 */
export function ceilingFor(ceiling: NatsCeiling, module: string): NatsPermissions {
  const of = (entries: readonly string[]) => [
    ...new Set(
      entries.flatMap((entry) => {
        const s = parseCeilingEntry(entry);
        return s.module === undefined || s.module === module ? [withModule(s.pattern, module)] : [];
      }),
    ),
  ];
  const subscribe = of(ceiling.subscribe);
  return { publish: of(ceiling.publish), subscribe: subscribe.includes(INBOX_PATTERN) ? subscribe : [...subscribe, INBOX_PATTERN] };
}

/** Every pattern of `permissions` (a grant of `module`) that reaches past `ceiling`, with a subject it reaches. */
export function ceilingBreaches(permissions: NatsPermissions, ceiling: NatsCeiling, module: string): CeilingBreach[] {
  const allowed = ceilingFor(ceiling, module);
  return PERMISSION_OPTIONS.flatMap((list) =>
    permissions[list].flatMap((pattern): CeilingBreach[] => {
      const reach = list === "subscribe" ? subscribeReach(pattern) : pattern;
      const example = uncovered(reach, allowed[list]);
      if (example === undefined) return [];
      return [{ list, pattern, example, ...(reach !== pattern && uncovered(pattern, allowed[list]) === undefined ? { widened: true as const } : {}) }];
    }),
  );
}

/**
 * Throws MeshError `InvalidRequest` when `permissions`, those of `nats.user` grant
 * `<module>/<requirement>`, reach past the ceiling of `provider`: the message names each
 * subject, what the ceiling allows the module, and what to do (the operator widens the
 * provider's ceiling, or the requirement asks for less).
 */
export function checkWithinCeiling(grant: { module: string; requirement: string }, permissions: NatsPermissions, provider: string, ceiling: NatsCeiling): void {
  const breaches = ceilingBreaches(permissions, ceiling, grant.module);
  if (breaches.length === 0) return;
  throw new MeshError(ErrorCodes.InvalidRequest, ceilingRefusal(grant, provider, ceiling, breaches));
}

/** The message of {@link checkWithinCeiling}, also what `apply` says about a requirement no provider would allow. */
export function ceilingRefusal(grant: { module: string; requirement: string }, provider: string, ceiling: NatsCeiling, breaches: readonly CeilingBreach[]): string {
  const allowed = ceilingFor(ceiling, grant.module);
  const lists = [...new Set(breaches.map((b) => b.list))];
  const asked = breaches
    .map((b) => {
      const why = b.widened ? `it reaches ${JSON.stringify(b.example)}: nats-server lets a subscription end in > where a permission ends in *; name the last token instead` : b.example === b.pattern ? "" : `it reaches ${JSON.stringify(b.example)}`;
      return `${b.list} ${JSON.stringify(b.pattern)}${why ? ` (${why})` : ""}`;
    })
    .join(", ");
  const ceilings = lists.map((l) => `${l} ${allowed[l].length ? allowed[l].join(", ") : "nothing"}`).join("; ");
  const options = lists.map((l) => `options.${CeilingOptions[l]}`).join(" and ");
  return (
    `nats.user ${grant.module}/${grant.requirement} asks to ${asked}, past the ceiling of provider ${provider}, which lets module ${grant.module} ${ceilings}. ` +
    `Ask the operator to widen the provider's ${options} (an entry "${grant.module}:<pattern>" widens it for module ${grant.module} alone), ` +
    `or ask for less in the requirement's ${lists.map((l) => `options.${l}`).join(" and ")}`
  );
}
