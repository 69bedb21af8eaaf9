/**
 * Redis ACL names and rules of a grant, and the mesh's record of it: the pure part of the
 * `redis.user` adapter (redis.ts holds the side effects).
 *
 * The record lives in the user itself, as a selector that allows no command:
 * `(~_mesh:grant:<module>/<requirement> ~_mesh:a:<generation>:<sha256> … -@all)`. Its key
 * patterns are data, not rights: the grant's mark and, per slot, which generation each password
 * hash belongs to (Redis keeps hashes without a label). So the record is saved, loaded and
 * deleted with the user, and is not lost to FLUSHALL or to eviction (a cache's `allkeys-lru`
 * would evict a key); no grant's user can read it (ACL GETUSER/LIST are `@dangerous`).
 *
 * Every name is checked against a strict pattern even though each goes to Redis as a RESP
 * argument of its own (nothing is spliced into a command line): a module name with a glob
 * character would widen the key pattern `~<module>:*` to other modules' keys.
 */
import { createHash } from "node:crypto";
import { ErrorCodes, MeshError } from "@mesh/shared";
import { SLOTS, type Slot } from "./alternating.js";

/** A mesh name as it may reach an ACL rule: no glob character (`*?[]\`), no space, no `.`, `:` or `/`. */
const ACL_NAME_PART = /^[a-z][a-z0-9-]*$/;

/** The ACL user names the adapter makes: `mesh.<module>.<requirement>`. */
export const REDIS_USER_NAME = /^mesh\.[a-z][a-z0-9-]*\.[a-z][a-z0-9-]*$/;

/**
 * What the mesh's own keys and record patterns start with. No module name starts with `_`, so
 * no grant's key pattern `~<module>:*` covers them: a module named `mesh` gets `~mesh:*`.
 */
export const MESH_KEY_PREFIX = "_mesh:";

/**
 * What a grant's user may run: everything but `@dangerous` (on 7.0 a superset of `@admin`:
 * ACL, CONFIG, CLIENT KILL/LIST, SHUTDOWN, MONITOR, DEBUG, MODULE, replication, and the
 * whole-keyspace FLUSHALL, FLUSHDB, KEYS, SWAPDB, INFO, SORT, MIGRATE, RESTORE), and the
 * commands outside it that act on state every tenant shares: FUNCTION (loads, lists, deletes
 * and flushes the server's one function library) and SCRIPT FLUSH/KILL. A deny-list, not an
 * allow-list, so data-type commands of later Redis versions work without a change here.
 * Still allowed and shared: SCAN, RANDOMKEY, DBSIZE and PUBSUB CHANNELS show other tenants'
 * key and channel *names* (never values); SCAN with MATCH `<module>:*` is how a module lists its
 * own keys, so it stays.
 */
export const COMMAND_RULES = ["+@all", "-@dangerous", "-function", "-script|flush", "-script|kill"] as const;

/** The Redis names of one grant. */
export interface RedisNames {
  /** The ACL user: `mesh.<module>.<requirement>`, one-to-one since mesh names hold no `.`. */
  user: string;
  /** What the user's keys and channels start with: `<module>:`, shared by the module's grants. */
  keyPrefix: string;
  /** The record's mark: `<module>/<requirement>`. */
  mark: string;
  /**
   * A counter every change of the user increments, so a change can WATCH it (Redis cannot
   * WATCH an ACL) and two provisioners racing converge. Losing it (FLUSHALL) loses nothing.
   */
  versionKey: string;
}

/** Throws MeshError `InvalidName` unless `name` is a valid mesh name that can go into an ACL rule. */
function checkPart(name: string, what: string): string {
  if (typeof name !== "string" || !ACL_NAME_PART.test(name)) {
    throw new MeshError(
      ErrorCodes.InvalidName,
      `Redis: ${what} name ${JSON.stringify(name)} is refused: it must be lower-case letters, digits and -, starting with a letter`,
    );
  }
  return name;
}

/** The names of grant `module/requirement`; throws MeshError `InvalidName` for a name that cannot be one. */
export function redisNames(module: string, requirement: string): RedisNames {
  const user = `mesh.${checkPart(module, "module")}.${checkPart(requirement, "requirement")}`;
  if (!REDIS_USER_NAME.test(user)) throw new MeshError(ErrorCodes.InvalidName, `Redis: ACL user name ${JSON.stringify(user)} is refused`);
  return { user, keyPrefix: `${module}:`, mark: `${module}/${requirement}`, versionKey: `${MESH_KEY_PREFIX}acl:${user}` };
}

/** The SHA-256 (hex) Redis keeps of a password; sent as `#<hex>`, so the plaintext never reaches the server. */
export function passwordHash(password: string): string {
  return createHash("sha256").update(password, "utf8").digest("hex");
}

/** Which generation's password a slot holds. */
export interface SlotValue {
  generation: number;
  hash: string;
}

/** The mesh's record of a user: its mark and its slots. */
export interface AclRecord {
  /** `<module>/<requirement>` on a user the mesh made; absent on anyone else's. */
  grant?: string;
  a?: SlotValue;
  b?: SlotValue;
}

const GRANT_PATTERN = `~${MESH_KEY_PREFIX}grant:`;
const SLOT_PATTERN = /^~_mesh:([ab]):([1-9][0-9]{0,15}):([0-9a-f]{64})$/;

/** The record as the selector that carries it: key patterns as data, no command allowed. */
export function recordSelector(record: AclRecord & { grant: string }): string {
  const slots = SLOTS.flatMap((s) => {
    const v = record[s];
    return v ? [`~${MESH_KEY_PREFIX}${s}:${v.generation}:${v.hash}`] : [];
  });
  return `(${[`${GRANT_PATTERN}${record.grant}`, ...slots, "resetchannels", "-@all"].join(" ")})`;
}

/** What `ACL GETUSER` says of a user, as far as the adapter reads it. */
export interface AclUser {
  flags: string[];
  /** SHA-256 hex of each password. */
  passwords: string[];
  record: AclRecord;
}

/** A field/value list of a RESP reply as a map. */
function replyFields(list: unknown): Map<string, unknown> {
  const fields = new Map<string, unknown>();
  if (Array.isArray(list)) for (let i = 0; i + 1 < list.length; i += 2) fields.set(String(list[i]), list[i + 1]);
  return fields;
}

const strings = (v: unknown): string[] => (Array.isArray(v) ? v.map(String) : String(v ?? "").split(" ")).filter(Boolean);

/**
 * The user in an `ACL GETUSER` reply (null: there is none). Its record is read from the key
 * patterns (`keys`, a space-separated string on 7.0) of the selector that has the mark; empty
 * when none has.
 */
export function parseAclUser(reply: unknown): AclUser | undefined {
  if (!Array.isArray(reply)) return undefined;
  const fields = replyFields(reply);
  let record: AclRecord = {};
  for (const selector of Array.isArray(fields.get("selectors")) ? (fields.get("selectors") as unknown[]) : []) {
    const patterns = strings(replyFields(selector).get("keys"));
    const grant = patterns.find((p) => p.startsWith(GRANT_PATTERN));
    if (!grant) continue;
    record = { grant: grant.slice(GRANT_PATTERN.length) };
    for (const p of patterns) {
      const m = SLOT_PATTERN.exec(p);
      if (m) record[m[1] as Slot] = { generation: Number(m[2]), hash: m[3]! };
    }
    break;
  }
  return { flags: strings(fields.get("flags")), passwords: strings(fields.get("passwords")), record };
}

/**
 * The whole ACL of a grant's user, for one `ACL SETUSER <user> …`: `reset` first, so what an
 * earlier call or a person set is gone and the result depends on these arguments alone. The
 * passwords are the record's; with none the user is on but nobody can log in.
 */
export function aclRules(names: RedisNames, record: AclRecord & { grant: string }): string[] {
  const hashes = SLOTS.flatMap((s) => (record[s] ? [`#${record[s].hash}`] : []));
  return ["reset", "on", ...hashes, `~${names.keyPrefix}*`, `&${names.keyPrefix}*`, ...COMMAND_RULES, recordSelector(record)];
}
