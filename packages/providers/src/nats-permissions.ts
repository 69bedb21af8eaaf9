/**
 * What a `nats.user` identity may do, from its requirement's options, as pure functions: the
 * subject patterns it may publish and subscribe to, validated against a strict pattern before
 * they go into a user JWT (nats-user.ts).
 */
import { ErrorCodes, MeshError, moduleSubjectPattern, type RequirementOptions } from "@mesh/shared";

/** Subscribed by every grant user, so its requests get their replies. */
export const INBOX_PATTERN = "_INBOX.>";

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
}

const PERMISSION_OPTIONS = ["publish", "subscribe"] as const;

/**
 * The permissions of a `nats.user` grant of `module` from its requirement's options:
 * `publish` and `subscribe`, each a subject pattern or a list of them, default to the module's
 * own namespace ({@link moduleSubjectPattern}); `_INBOX.>` is added to `subscribe` so request
 * and reply work. Throws MeshError `InvalidRequest`, naming the option, for an unknown option,
 * a value that is not a string or list of strings, too many patterns, or a refused pattern.
 */
export function natsPermissions(module: string, options: RequirementOptions = {}): NatsPermissions {
  for (const key of Object.keys(options)) {
    if (!(PERMISSION_OPTIONS as readonly string[]).includes(key)) {
      throw new MeshError(
        ErrorCodes.InvalidRequest,
        `requirement option ${JSON.stringify(key)} is not one of nats.user's (${PERMISSION_OPTIONS.join(", ")}); remove it or fix its name`,
      );
    }
  }
  const list = (key: (typeof PERMISSION_OPTIONS)[number]): string[] => {
    const v = options[key];
    if (v === undefined) return [moduleSubjectPattern(module)];
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
  return { publish: list("publish"), subscribe: subscribe.includes(INBOX_PATTERN) ? subscribe : [...subscribe, INBOX_PATTERN] };
}
