/**
 * What a `nats.user` identity may do, as pure functions: the subject patterns it may publish
 * and subscribe to, from its requirement's options, validated against a strict pattern before
 * they go into a user JWT (the nats.user provider); and the ceiling the operator sets on the provider,
 * which every requirement it serves must stay within.
 */
import { ErrorCodes, MeshError } from "./errors.js";
import { INBOX_ROOT_PATTERNS, confineToInbox } from "./inboxes.js";
import { isValidName } from "./names.js";
import {
  CeilingOptions,
  DEFAULT_NATS_CEILING,
  EVERY_MODULE,
  MODULE_PLACEHOLDER,
  RESPONSES_CEILING_OPTION,
  parseCeilingEntry,
  type NatsCeiling,
} from "./nats-ceiling.js";
import { Kinds } from "./kinds.js";
import type { ProviderOptions, RequirementOptions } from "./schemas/manifest.js";
import { MAX_SUBJECT_LENGTH, MAX_SUBJECTS, requirementOptionNames } from "./schemas/requirement-options.js";
import { moduleSubjectPattern, subjects } from "./subjects.js";
import { overlap, uncovered } from "./subject-containment.js";

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

/** What an identity may do, as its requirement asks (its own inbox comes on top: {@link identityPermissions}). */
export interface NatsPermissions {
  /** Subject patterns it may publish to; empty: none. */
  publish: string[];
  /** Subject patterns it may subscribe to. */
  subscribe: string[];
  /** Subject patterns it may not publish to even where `publish` allows them (the server's deny wins); absent: none. */
  denyPublish?: string[];
  /** Subject patterns it may not subscribe to even where `subscribe` allows them; absent: none. */
  denySubscribe?: string[];
  /** It may answer the requests it receives (the response permission), once each, within the window of nats-jwt.ts's `RESPONSE_TTL_MS`. */
  allowResponses?: boolean;
}

/** The allow lists, which a provider's ceiling bounds. */
const PERMISSION_OPTIONS = ["publish", "subscribe"] as const;
/** What only narrows an allow list: no ceiling bounds it. */
const DENY_OPTION = "denyPublish";
/** Asks for the response permission, which the provider's {@link RESPONSES_CEILING_OPTION} bounds. */
const RESPONSES_OPTION = "allowResponses";

/**
 * The permissions of a `nats.user` grant of `module` from its requirement's options:
 * `publish` and `subscribe`, each a subject pattern or a list of them, default to the module's
 * own namespace ({@link moduleSubjectPattern}); `allowResponses: true` asks for the response
 * permission (an identity that serves requests). A subscribe pattern that reaches into an
 * inbox (`_INBOX.>`, `_MESH_INBOX.>`, `_GRANT_INBOX.>`: `>`, `*.>` and the like reach them all) is
 * refused whatever a ceiling allows ({@link inboxRefusal}). Throws MeshError `InvalidRequest`, naming
 * the option, for an unknown option, a value that is not a string or list of strings, too many
 * patterns, or a refused pattern.
 */
export function natsPermissions(module: string, options: RequirementOptions = {}): NatsPermissions {
  const accepted = requirementOptionNames(Kinds.NatsUser);
  for (const key of Object.keys(options)) {
    if (!accepted.includes(key)) {
      throw new MeshError(
        ErrorCodes.InvalidRequest,
        `requirement option ${JSON.stringify(key)} is not one of nats.user's (${accepted.join(", ")}); remove it or fix its name`,
      );
    }
  }
  const responses = options[RESPONSES_OPTION];
  if (responses !== undefined && typeof responses !== "boolean") {
    throw new MeshError(ErrorCodes.InvalidRequest, `requirement option ${RESPONSES_OPTION} must be true or false, not ${JSON.stringify(responses)}`);
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
    const patterns = [...new Set(values.map((s) => checkSubjectPattern(s, `subject in requirement option ${key}`)))];
    for (const pattern of key === "subscribe" ? patterns : []) {
      const why = inboxRefusal(pattern);
      if (why) throw new MeshError(ErrorCodes.InvalidRequest, `requirement option subscribe: ${why}`);
    }
    return patterns;
  };
  const deny = list(DENY_OPTION);
  return {
    publish: list("publish"),
    subscribe: list("subscribe"),
    ...(deny.length ? { denyPublish: deny } : {}),
    ...(responses ? { allowResponses: true as const } : {}),
  };
}

/**
 * Why subscribe pattern `pattern` is refused, or undefined when it reaches no inbox. Publishing
 * needs no such check: every identity's JWT denies publishing under the inbox roots, and its
 * answers go out through the response permission, which the deny does not stop.
 */
export function inboxRefusal(pattern: string): string | undefined {
  for (const root of INBOX_ROOT_PATTERNS) {
    const example = overlap(subscribeReach(pattern), root);
    if (example === undefined) continue;
    return (
      `subscribe ${JSON.stringify(pattern)} is refused: it reaches ${JSON.stringify(example)}, under ${root}, where other identities get their replies and JetStream deliveries, and could answer them in their name. ` +
      `Name the subjects the module listens on (a pattern whose first token is not a wildcard); the grant's own replies come under its binding's inboxPrefix, which the mesh allows by itself`
    );
  }
  return undefined;
}

/**
 * What the user JWT of `nats.user` grant `<module>/<requirement>` allows, from what its
 * requirement asks (`asked`, within its provider's ceiling): that, and its own inbox prefix
 * (`subjects.grantInboxPrefix`), confined to it (inboxes.ts in @mesh/shared).
 */
export function identityPermissions(grant: { module: string; requirement: string }, asked: NatsPermissions): NatsPermissions {
  return confineToInbox(asked, subjects.grantInboxPrefix(grant.module, grant.requirement));
}

/** One pattern a requirement asks for that its provider's ceiling does not allow. */
export interface CeilingBreach {
  /** The allow list the pattern is in, or `allowResponses` asked for where the ceiling allows no responses. */
  list: (typeof PERMISSION_OPTIONS)[number] | typeof RESPONSES_OPTION;
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
 * pattern or a list ({@link NatsCeiling}; unset: {@link DEFAULT_NATS_CEILING}), and
 * `allowResponses` (the modules that may ask for the response permission; unset: none). Throws
 * MeshError `ProviderMisconfigured`, naming the option and the entry, for an entry whose scope is
 * not a module name or whose pattern is not a subject pattern once `{module}` is filled in.
 */
export function natsCeiling(provider: string, options: ProviderOptions = {}): NatsCeiling {
  const bad = (option: string, entry: unknown, why: string) =>
    new MeshError(
      ErrorCodes.ProviderMisconfigured,
      `provider ${provider}: options.${option} entry ${JSON.stringify(entry)} ${why}; fix the provider's document`,
    );
  const list = (key: keyof typeof CeilingOptions): readonly string[] => {
    const option = CeilingOptions[key];
    const v = options[option];
    if (v === undefined) return DEFAULT_NATS_CEILING[key];
    const entries = typeof v === "string" ? [v] : v;
    for (const entry of entries) {
      const { module, pattern } = parseCeilingEntry(entry);
      if (module !== undefined && !isValidName(module))
        throw bad(option, entry, "is scoped to something that is not a module name (write <module>:<pattern>, e.g. billing:orders.>)");
      try {
        checkSubjectPattern(withModule(pattern, "m"), "pattern");
      } catch {
        throw bad(option, entry, `is not a subject pattern: a subject ${SUBJECT_RULE}, where ${MODULE_PLACEHOLDER} stands for the module`);
      }
    }
    return entries;
  };
  const r = options[RESPONSES_CEILING_OPTION];
  const responses = r === undefined ? [] : typeof r === "string" ? [r] : r;
  for (const entry of responses)
    if (entry !== EVERY_MODULE && !isValidName(entry)) throw bad(RESPONSES_CEILING_OPTION, entry, `is not a module name (or ${EVERY_MODULE} for every module)`);
  return { publish: list("publish"), subscribe: list("subscribe"), ...(responses.length ? { responses } : {}) };
}

/** True when `ceiling` lets `module`'s requirements ask for the response permission. */
export function responsesAllowed(ceiling: NatsCeiling, module: string): boolean {
  return (ceiling.responses ?? []).some((m) => m === EVERY_MODULE || m === module);
}

/** The ceiling's patterns for `module`: entries scoped to another module left out, `{module}` filled in. */
export function ceilingFor(ceiling: NatsCeiling, module: string): NatsPermissions {
  const of = (entries: readonly string[]) => [
    ...new Set(
      entries.flatMap((entry) => {
        const s = parseCeilingEntry(entry);
        return s.module === undefined || s.module === module ? [withModule(s.pattern, module)] : [];
      }),
    ),
  ];
  return { publish: of(ceiling.publish), subscribe: of(ceiling.subscribe) };
}

/** Every pattern of `permissions` (a grant of `module`) that reaches past `ceiling`, with a subject it reaches. */
export function ceilingBreaches(permissions: NatsPermissions, ceiling: NatsCeiling, module: string): CeilingBreach[] {
  const allowed = ceilingFor(ceiling, module);
  const patterns = PERMISSION_OPTIONS.flatMap((list) =>
    permissions[list].flatMap((pattern): CeilingBreach[] => {
      const reach = list === "subscribe" ? subscribeReach(pattern) : pattern;
      const example = uncovered(reach, allowed[list]);
      if (example === undefined) return [];
      return [{ list, pattern, example, ...(reach !== pattern && uncovered(pattern, allowed[list]) === undefined ? { widened: true as const } : {}) }];
    }),
  );
  const responses: CeilingBreach[] =
    permissions.allowResponses && !responsesAllowed(ceiling, module) ? [{ list: RESPONSES_OPTION, pattern: "true", example: "true" }] : [];
  return [...patterns, ...responses];
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
export function ceilingRefusal(
  grant: { module: string; requirement: string },
  provider: string,
  ceiling: NatsCeiling,
  breaches: readonly CeilingBreach[],
): string {
  const allowed = ceilingFor(ceiling, grant.module);
  const lists = [...new Set(breaches.map((b) => b.list))];
  const asked = breaches
    .map((b) => {
      const why = b.widened
        ? `it reaches ${JSON.stringify(b.example)}: nats-server lets a subscription end in > where a permission ends in *; name the last token instead`
        : b.example === b.pattern
          ? ""
          : `it reaches ${JSON.stringify(b.example)}`;
      if (b.list === RESPONSES_OPTION) return "answer the requests it receives (allowResponses)";
      return `${b.list} ${JSON.stringify(b.pattern)}${why ? ` (${why})` : ""}`;
    })
    .join(", ");
  const ceilings = lists
    .map((l) => (l === RESPONSES_OPTION ? "answer no requests" : `${l} ${allowed[l].length ? allowed[l].join(", ") : "nothing"}`))
    .join("; ");
  const options = lists.map((l) => `options.${l === RESPONSES_OPTION ? RESPONSES_CEILING_OPTION : CeilingOptions[l]}`).join(" and ");
  return (
    `nats.user ${grant.module}/${grant.requirement} asks to ${asked}, past the ceiling of provider ${provider}, which lets module ${grant.module} ${ceilings}. ` +
    `Ask the operator to widen the provider's ${options} (an entry "${grant.module}:<pattern>" widens it for module ${grant.module} alone; allowResponses lists modules), ` +
    `or ask for less in the requirement's ${lists.map((l) => `options.${l}`).join(" and ")}`
  );
}
