/**
 * What the `oci.registry` adapter and the mesh's token issuer (services/oci-token-issuer) must
 * agree on, as pure functions: the names of a grant's user, how a password is hashed and checked,
 * and which of a client's requested scopes a user is granted.
 *
 * A registry token names each repository it allows (the token format has no wildcards), so the
 * issuer grants, of the scopes a client asks for, `pull` and `push` on repositories inside the
 * user's namespace `<module>/…`, and nothing else: no other module's repository, no catalog, no
 * `delete` (Docker's token specification: the server grants the intersection of what was asked
 * and what is allowed, and a request for more is not an error).
 */
import { randomBytes, scrypt, timingSafeEqual, type ScryptOptions } from "node:crypto";

/** The names of one grant's user at the token issuer. */
export interface OciNames {
  /** The user a holder authenticates as: `<module>.<requirement>` (mesh names have no dots, so it is one-to-one). */
  user: string;
  /** The grant it belongs to, `<module>/<requirement>`; the issuer never changes a user of another mark. */
  mark: string;
  /** The repository namespace: every repository the user may use is `<namespace>/…`. */
  namespace: string;
}

/** The names of grant `module/requirement`; both are valid mesh names (the caller checks). */
export function ociNames(module: string, requirement: string): OciNames {
  return { user: `${module}.${requirement}`, mark: `${module}/${requirement}`, namespace: module };
}

/** The actions a grant's user may be given on a repository of its namespace. */
export const GRANTED_ACTIONS = ["pull", "push"] as const;

/** One entry of a token's `access` claim (distribution's `ResourceActions`). */
export interface ResourceActions {
  type: "repository";
  name: string;
  actions: string[];
}

/**
 * A repository name as the distribution registry accepts it (reference/regexp.go): path
 * components of lower-case letters and digits, separated inside by `.`, `_`, `__` or dashes,
 * joined by `/`; at most 255 characters.
 */
const REPOSITORY_NAME = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:\/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$/;

/** Whether `name` is a repository inside `namespace` (`shop/api`, `shop/tools/cli`; not `shop` itself, nor `shopping/x`). */
export function inNamespace(name: string, namespace: string): boolean {
  return name.length <= 255 && REPOSITORY_NAME.test(name) && name.startsWith(`${namespace}/`);
}

/**
 * The access a user of `namespace` is granted for the `scope` parameters of a token request
 * (each may hold several scopes separated by spaces: `repository:shop/api:pull,push`). Scopes
 * outside the namespace, of another type, or malformed are left out; actions are narrowed to
 * {@link GRANTED_ACTIONS}; a repository asked for twice is merged. The result may be empty:
 * a token for no repository, which is what `docker login` asks for.
 */
export function grantedAccess(scopes: readonly string[], namespace: string): ResourceActions[] {
  const byName = new Map<string, Set<string>>();
  for (const scope of scopes.flatMap((s) => s.split(" ")).filter(Boolean)) {
    // repository:<name>:<actions>; a name may hold a port-less host part but never a colon here.
    const parts = scope.split(":");
    if (parts.length !== 3 || parts[0] !== "repository") continue;
    const [, name, actions] = parts as [string, string, string];
    if (!inNamespace(name, namespace)) continue;
    const granted = actions.split(",").filter((a): a is (typeof GRANTED_ACTIONS)[number] => (GRANTED_ACTIONS as readonly string[]).includes(a));
    if (granted.length === 0) continue;
    const set = byName.get(name) ?? new Set<string>();
    for (const a of granted) set.add(a);
    byName.set(name, set);
  }
  return [...byName].map(([name, set]) => ({ type: "repository", name, actions: GRANTED_ACTIONS.filter((a) => set.has(a)) }));
}

/** scrypt's cost: 2^14, r 8, p 1 (the parameters RFC 7914 and OWASP name for interactive logins; about 16 MiB and tens of ms). */
const SCRYPT: ScryptOptions & { N: number; r: number; p: number } = { N: 16_384, r: 8, p: 1, maxmem: 64 * 1024 * 1024 };
const KEY_BYTES = 32;

function derive(password: string, salt: Buffer, opts: typeof SCRYPT): Promise<Buffer> {
  return new Promise((resolve, reject) => scrypt(password, salt, KEY_BYTES, opts, (e, key) => (e ? reject(e) : resolve(key))));
}

/**
 * A salted scrypt hash of `password`, as `scrypt$N$r$p$<salt>$<hash>` (base64url): what the
 * adapter sends the issuer, so the plaintext never leaves the provisioner.
 */
export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16);
  const key = await derive(password, salt, SCRYPT);
  return ["scrypt", SCRYPT.N, SCRYPT.r, SCRYPT.p, salt.toString("base64url"), key.toString("base64url")].join("$");
}

/** Whether `password` matches `encoded` (made by {@link hashPassword}); false for anything malformed. Constant time in the hash. */
export async function verifyPassword(password: string, encoded: string): Promise<boolean> {
  const [tag, n, r, p, salt, hash] = encoded.split("$");
  if (tag !== "scrypt" || !salt || !hash) return false;
  const opts = { N: Number(n), r: Number(r), p: Number(p), maxmem: SCRYPT.maxmem };
  // Only the cost this code makes: a stored hash must not make the issuer spend unbounded memory.
  if (opts.N !== SCRYPT.N || opts.r !== SCRYPT.r || opts.p !== SCRYPT.p) return false;
  const expected = Buffer.from(hash, "base64url");
  if (expected.length !== KEY_BYTES) return false;
  const key = await derive(password, Buffer.from(salt, "base64url"), opts);
  return timingSafeEqual(key, expected);
}

/** Whether `encoded` has the form {@link hashPassword} makes (the issuer refuses anything else). */
export function isPasswordHash(encoded: unknown): encoded is string {
  if (typeof encoded !== "string") return false;
  const parts = encoded.split("$");
  return parts.length === 6 && parts[0] === "scrypt" && /^[A-Za-z0-9_-]{22}$/.test(parts[4]!) && /^[A-Za-z0-9_-]{43}$/.test(parts[5]!);
}
