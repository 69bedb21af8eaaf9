/**
 * What the `nats.user` adapter puts into a NATS server's configuration, as pure functions: the
 * user names of a grant, the permissions a requirement asks for, the record kept per user, and
 * the users file rendered from those records.
 *
 * Everything written into the file is validated twice over: subjects and names against strict
 * patterns, then every string through {@link confString}, which accepts only printable ASCII
 * without quote or backslash and writes it as a double-quoted string. Nothing from a manifest
 * can therefore open a block, end a string or reference a variable in the server's config.
 */
import { createHash } from "node:crypto";
import { ErrorCodes, MeshError, isValidName, moduleSubjectPattern, type RequirementOptions } from "@mesh/shared";

/** What every record carries, so the adapter reads back only what it wrote. */
export const RECORD_MARKER = "mesh nats.user";

/** The record of the provider's admin user, in the records directory; no grant user can be named so. */
export const ADMIN_RECORD_FILE = "_admin.json";

/** Subscribed by every grant user, so its requests get their replies. */
export const INBOX_PATTERN = "_INBOX.>";

/** Longest subject pattern, and most patterns in one list, that a requirement may ask for. */
export const MAX_SUBJECT_LENGTH = 255;
export const MAX_SUBJECTS = 64;

/** One subject token that is not a wildcard: letters, digits, `_`, `-` and `$` (for `$JS`, `$KV`). */
const SUBJECT_TOKEN = /^[A-Za-z0-9_$-]+$/;

export const SUBJECT_RULE =
  "must be dot-separated tokens of letters, digits, _, - and $, where a token may also be * and the last one >, at most 255 characters";

/** User names the adapter writes: the admin's (from the provider) and the grants' own. */
export const NATS_USER_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/;

/** A bcrypt hash as nats-server 2.9 accepts it (`$2a$`, `$2b$` and `$2y$` were checked to log in). */
export const BCRYPT_HASH = /^\$2[aby]\$\d\d\$[./A-Za-z0-9]{53}$/;

/** Users whose name starts so are the adapter's probes (see {@link probeUserName}); no admin may be named so. */
export const PROBE_USER_PREFIX = "mesh-probe-";

/**
 * Throws MeshError `ProviderMisconfigured` unless `name` may be the admin user of a users file:
 * a {@link NATS_USER_NAME} that is not a probe's. `where` names where it came from (`provider x`).
 */
export function checkAdminName(name: unknown, where: string): string {
  if (typeof name !== "string" || !NATS_USER_NAME.test(name) || name.startsWith(PROBE_USER_PREFIX)) {
    throw new MeshError(
      ErrorCodes.ProviderMisconfigured,
      `${where}: admin.username ${JSON.stringify(name)} is refused for NATS: it must be 1-100 letters, digits, ., _ and -, starting with a letter or digit, and not start with ${PROBE_USER_PREFIX}`,
    );
  }
  return name;
}

/** Printable ASCII without space, `"` and `\`: what {@link confString} writes. */
const CONF_SAFE = /^[\x21\x23-\x5b\x5d-\x7e]+$/;

/**
 * `s` as a double-quoted string of the NATS config format. Throws MeshError `Internal` for
 * anything but printable ASCII without space, quote and backslash: the validated names,
 * subjects and bcrypt hashes never contain them, and the config format's escapes differ from
 * JSON's, so nothing that would need one is written at all.
 */
export function confString(s: string): string {
  if (typeof s !== "string" || !CONF_SAFE.test(s)) {
    throw new MeshError(ErrorCodes.Internal, `refusing to write ${JSON.stringify(s)} into a NATS config: not printable ASCII without space, quote and backslash`);
  }
  return `"${s}"`;
}

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

/** What a grant user may do; `allow_responses` is always on, so it can answer requests it receives. */
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

/** The NATS user of `generation` of a grant: `<module>_<requirement>_a` (odd) or `_b` (even); one-to-one, as mesh names have no `_`. */
export function natsUserName(module: string, requirement: string, generation: number): string {
  return `${module}_${requirement}_${generation % 2 === 1 ? "a" : "b"}`;
}

/** Both users of a grant, generation-odd first. */
export function natsUserNames(module: string, requirement: string): readonly [string, string] {
  return [natsUserName(module, requirement, 1), natsUserName(module, requirement, 2)];
}

/** The file a user's record is kept in, inside the records directory. */
export const recordFileName = (user: string) => `${user}.json`;

/** One user of the users file, as kept in its own file in the records directory. */
export interface UserRecord {
  mesh: typeof RECORD_MARKER;
  user: string;
  /** bcrypt hash of the password; the password itself is never on disk. */
  passwordHash: string;
  /** `<module>/<requirement>` of the grant the user is for; absent for the provider's admin. */
  grant?: string;
  /** The generation the user was last created for. */
  generation?: number;
  /** Absent for the admin, who may use every subject. */
  permissions?: NatsPermissions;
}

/**
 * Parses and checks a record as read from disk; throws an Error saying what is wrong (the
 * caller names the file). A record is trusted no more than a manifest: it reaches the config.
 */
export function parseUserRecord(text: string): UserRecord {
  const r = JSON.parse(text) as Partial<UserRecord> | null;
  if (typeof r !== "object" || r === null || r.mesh !== RECORD_MARKER) throw new Error(`it does not carry the marker ${JSON.stringify(RECORD_MARKER)}`);
  if (typeof r.user !== "string" || !NATS_USER_NAME.test(r.user) || r.user.startsWith(PROBE_USER_PREFIX)) throw new Error("its user name is refused");
  if (typeof r.passwordHash !== "string" || !BCRYPT_HASH.test(r.passwordHash)) throw new Error("its passwordHash is not a bcrypt hash");
  const record: UserRecord = { mesh: RECORD_MARKER, user: r.user, passwordHash: r.passwordHash };
  if (r.grant !== undefined) {
    const [module, requirement, ...rest] = typeof r.grant === "string" ? r.grant.split("/") : [];
    if (rest.length || !module || !requirement || !isValidName(module) || !isValidName(requirement)) throw new Error("its grant is not <module>/<requirement>");
    if (!Number.isSafeInteger(r.generation) || r.generation! < 1) throw new Error("its generation is not 1, 2, …");
    const p = r.permissions;
    if (!p || !Array.isArray(p.publish) || !Array.isArray(p.subscribe)) throw new Error("it has no publish and subscribe lists");
    record.grant = r.grant;
    record.generation = r.generation!;
    record.permissions = {
      publish: p.publish.map((s) => checkSubjectPattern(s, "publish subject")),
      subscribe: p.subscribe.map((s) => checkSubjectPattern(s, "subscribe subject")),
    };
  } else if (r.permissions !== undefined) {
    throw new Error("a record without a grant (the admin's) has no permissions");
  }
  return record;
}

/** Records in a stable order (the admin's first, then by user name), as rendered and hashed. */
function ordered(records: readonly UserRecord[]): UserRecord[] {
  return [...records].sort((a, b) => Number(a.grant !== undefined) - Number(b.grant !== undefined) || (a.user < b.user ? -1 : a.user > b.user ? 1 : 0));
}

/** The revision of a set of records: 16 hex digits of the SHA-256 of their canonical JSON. */
export function revisionOf(records: readonly UserRecord[]): string {
  const canonical = ordered(records).map((r) => [r.user, r.passwordHash, r.grant ?? null, r.generation ?? null, r.permissions ?? null]);
  return createHash("sha256").update(JSON.stringify(canonical)).digest("hex").slice(0, 16);
}

/**
 * The probe user of a revision: it has the admin's password and may neither publish nor
 * subscribe. Logging in as it proves the server has loaded exactly that revision, which is
 * how the adapter knows a change is live (a removed user cannot be asked).
 */
export const probeUserName = (revision: string) => `${PROBE_USER_PREFIX}${revision}`;

const HEADER = "# NATS users of the mesh, written by the nats.user adapter of the provisioner. Do not edit:";
const REVISION_LINE = /^# mesh-revision: ([0-9a-f]{16})$/m;

/** True when `text` is a users file the adapter wrote (it never overwrites any other file). */
export const isRenderedUsersFile = (text: string) => text.startsWith(`${HEADER}\n`);

/** The revision a rendered users file was made from, or undefined. */
export function renderedRevision(text: string): string | undefined {
  return isRenderedUsersFile(text) ? REVISION_LINE.exec(text)?.[1] : undefined;
}

const list = (subjects: readonly string[]) => `[${subjects.map(confString).join(", ")}]`;
const allowOrNone = (subjects: readonly string[]) => (subjects.length > 0 ? `{allow: ${list(subjects)}}` : `{deny: [">"]}`);

/** The config line of one user, exactly as {@link renderUsersFile} writes it. */
export function userEntry(r: UserRecord): string {
  const perms = r.permissions
    ? `, permissions: {publish: ${allowOrNone(r.permissions.publish)}, subscribe: ${allowOrNone(r.permissions.subscribe)}, allow_responses: true}`
    : "";
  return `{user: ${confString(r.user)}, password: ${confString(r.passwordHash)}${perms}}`;
}

/**
 * The users file of `records`, included by the server's config: one `authorization` block
 * with the admin (every subject), the probe user of this revision, and one user per grant
 * record. Throws MeshError `Internal` when no admin record is among them: the mesh never
 * writes a file that would lock its own admin out.
 */
export function renderUsersFile(records: readonly UserRecord[], recordsDir: string): string {
  const sorted = ordered(records);
  const admin = sorted.find((r) => r.grant === undefined);
  if (!admin) throw new MeshError(ErrorCodes.Internal, `no admin record in ${recordsDir}; refusing to write a NATS users file without the admin`);
  const revision = revisionOf(sorted);
  const lines = [
    HEADER,
    `# it is rendered again from the records in ${recordsDir.replace(/[^\x20-\x7e]/g, "?")} on every change.`,
    `# mesh-revision: ${revision}`,
    "authorization {",
    "  users = [",
    `    ${userEntry(admin)}`,
    `    {user: ${confString(probeUserName(revision))}, password: ${confString(admin.passwordHash)}, permissions: {publish: {deny: [">"]}, subscribe: {deny: [">"]}}}`,
  ];
  for (const r of sorted) {
    if (r === admin) continue;
    lines.push(`    # ${r.grant}, generation ${r.generation}`, `    ${userEntry(r)}`);
  }
  lines.push("  ]", "}", "");
  return lines.join("\n");
}
