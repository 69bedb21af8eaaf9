/**
 * What a Provider document's admin password source may reach. The provisioner, the verifier
 * and the rotator read `admin.passwordEnv` or `admin.passwordFile` and send what they read to
 * the provider's endpoint (Redis `AUTH`, HTTP Basic, a database login), which the same document
 * names: a document that could name any variable or file would carry the mesh's own secrets to
 * any server. By default:
 *
 * - `passwordEnv` ends in `_PASSWORD` and does not start with `MESH_` (the mesh's settings and
 *   secrets: `MESH_MASTER_KEY`, `MESH_NATS_PASSWORD`…);
 * - `passwordFile` is none of the mesh's own files: not the master key, nothing in the mesh's
 *   state directory, its operator directory or a bindings root, with two exceptions the mesh
 *   itself relies on: the operator admin's `.creds` for a provider that serves NATS kinds only
 *   (which use it as a `.creds`: only a signature of the server's nonce is sent, never the
 *   seed), and the binding files of a grant the provider `needs` (a provider whose admin
 *   password is a mesh secret, docs/bootstrap.md, "Provider dependencies").
 *
 * Paths are compared as the kernel would open them: symlinks and `..` resolved, a file that does
 * not exist yet by its nearest existing parent. The services' environment may narrow both
 * (`MESH_ADMIN_PASSWORD_FILES`, `MESH_ADMIN_PASSWORD_ENVS`), never widen them.
 *
 * {@link checkAdminPassword} is the one rule: the resolver applies it to every Provider at apply
 * (the document is refused, naming the field and the rule), and `providerConfig` again where
 * the password is read, since the file system may have changed since, or differ there.
 */
import { realpathSync, statSync } from "node:fs";
import { dirname, isAbsolute, join, relative, resolve, sep } from "node:path";
import { ErrorCodes, MeshError } from "./errors.js";
import { NATS_KINDS, servedByNats } from "./kinds.js";
import { BINDING_KEY_PATTERN, isValidName, parseBindingGenerationDir } from "./names.js";
import type { ProviderDoc } from "./schemas/manifest.js";
import { parseGrantId } from "./subjects.js";
import { DEFAULT_BINDINGS_ROOT, DEFAULT_STATE_DIR, OPERATOR_ADMIN_CREDS, StateFiles } from "./state-dir.js";

/** Where the mesh's own secrets are, and how the services narrow the rule; all paths absolute. */
export interface AdminPasswordPolicy {
  /** The services' working directory, which a relative `passwordFile` is read from. */
  cwd: string;
  /** `MESH_MASTER_KEY_FILE` and `<state>/master.key`. */
  masterKeyFiles: string[];
  /** The mesh's own directory: `MESH_STATE_DIR`, default `.mesh` in the working directory. */
  stateDir: string;
  /** `<state>/nats-operator` and `MESH_OPERATOR_DIR`: keys, JWTs, the admin's `.creds`. */
  operatorDirs: string[];
  /** `<state>/bindings`, `MESH_BINDINGS_ROOT` and {@link DEFAULT_BINDINGS_ROOT}. */
  bindingsRoots: string[];
  /** `MESH_ADMIN_PASSWORD_FILES` (`:`-separated): when set, a `passwordFile` must be one of them or under one. */
  fileDirs?: string[];
  /** `MESH_ADMIN_PASSWORD_ENVS` (`,`-separated): when set, a `passwordEnv` must be one of them. */
  envNames?: string[];
}

/**
 * The policy of a service with environment `env` and working directory `cwd`. Throws a
 * MeshError `ProviderMisconfigured` for a `MESH_ADMIN_PASSWORD_FILES` entry that is not
 * absolute, or a `MESH_ADMIN_PASSWORD_ENVS` entry that the default rule refuses anyway.
 */
export function adminPasswordPolicy(env: NodeJS.ProcessEnv = process.env, cwd: string = process.cwd()): AdminPasswordPolicy {
  const stateDir = resolve(cwd, env.MESH_STATE_DIR || DEFAULT_STATE_DIR);
  const list = (value: string | undefined, separator: string) =>
    (value ?? "")
      .split(separator)
      .map((s) => s.trim())
      .filter(Boolean);
  const policy: AdminPasswordPolicy = {
    cwd,
    masterKeyFiles: [join(stateDir, StateFiles.masterKey), ...(env.MESH_MASTER_KEY_FILE ? [resolve(cwd, env.MESH_MASTER_KEY_FILE)] : [])],
    stateDir,
    operatorDirs: [join(stateDir, StateFiles.operatorDir), ...(env.MESH_OPERATOR_DIR ? [resolve(cwd, env.MESH_OPERATOR_DIR)] : [])],
    bindingsRoots: [join(stateDir, StateFiles.bindings), ...(env.MESH_BINDINGS_ROOT ? [resolve(cwd, env.MESH_BINDINGS_ROOT)] : []), DEFAULT_BINDINGS_ROOT],
  };
  const files = list(env.MESH_ADMIN_PASSWORD_FILES, ":");
  if (files.length) {
    const relativeOne = files.find((f) => !isAbsolute(f));
    if (relativeOne)
      throw new MeshError(
        ErrorCodes.ProviderMisconfigured,
        `MESH_ADMIN_PASSWORD_FILES: ${JSON.stringify(relativeOne)} is not an absolute path; list absolute directories or files, separated by ':'`,
      );
    policy.fileDirs = files;
  }
  const envs = list(env.MESH_ADMIN_PASSWORD_ENVS, ",");
  if (envs.length) {
    const refused = envs.find((n) => envNameRefusal(n) !== undefined);
    if (refused)
      throw new MeshError(ErrorCodes.ProviderMisconfigured, `MESH_ADMIN_PASSWORD_ENVS: ${refused} ${envNameRefusal(refused)}; it may only narrow that rule`);
    policy.envNames = envs;
  }
  return policy;
}

/** A refused admin password source: the field, and why, with what to do. */
export interface AdminPasswordProblem {
  path: "admin.passwordEnv" | "admin.passwordFile";
  message: string;
}

/** Why the default rule refuses `name` as a `passwordEnv`, or undefined when it takes it. */
function envNameRefusal(name: string): string | undefined {
  if (/^MESH_/i.test(name)) return "starts with MESH_, which names the mesh's own settings and secrets";
  if (!name.endsWith("_PASSWORD")) return "does not end in _PASSWORD";
  return undefined;
}

const PASSWORD_ENV_RULE = "a provider's admin password is read only from a variable whose name ends in _PASSWORD and does not start with MESH_";
const OWN_FILE_RULE = "a provider's admin password may not be read from a file of the mesh's own, which the provisioner would send to the provider's endpoint";
const FILE_FIX = "put the admin password in a file of its own (such as /etc/mesh/pg-admin-password) and name that";

/**
 * `path` as the kernel resolves it (symlinks, `.`, `..`; relative to `cwd`); for a path that
 * does not exist, its longest existing prefix resolved and the rest applied to it as written.
 * Never throws.
 */
export function realPath(path: string, cwd: string = process.cwd()): string {
  // Joined as text, not with path.join, which would take `..` off before a symlink is followed.
  const parts = (isAbsolute(path) ? path : `${cwd}/${path}`).split("/");
  for (let i = parts.length; i > 0; i--) {
    const prefix = parts.slice(0, i).join("/") || "/";
    let real: string;
    try {
      real = realpathSync.native(prefix);
    } catch {
      continue;
    }
    for (const p of parts.slice(i)) {
      if (p === "" || p === ".") continue;
      real = p === ".." ? dirname(real) : join(real, p);
    }
    return real;
  }
  return resolve(cwd, path);
}

/** True when `path` is `dir` or inside it (both resolved). */
function isWithin(path: string, dir: string): boolean {
  const r = relative(dir, path);
  return r === "" || (!r.startsWith(`..${sep}`) && r !== ".." && !isAbsolute(r));
}

/**
 * The grant (`<module>/<requirement>`) whose binding file `path` is, `path` being inside the
 * bindings root `root` (both resolved): `[<node>/]<module>/<part>/<requirement>/<key>`, or the
 * generation directory that symlink points to, `[<node>/]<module>/.<part>.generations/<requirement>-g<k>-…/<key>`
 * (inside `<part>/` as `.<requirement>-g<k>-…` for agents before the generations directory).
 * Undefined for anything else there, such as a part's env file, which holds all its requirements.
 */
function bindingGrantOf(path: string, root: string): { module: string; requirement: string; key: string } | undefined {
  const parts = relative(root, path).split(sep);
  if (parts.length !== 4 && parts.length !== 5) return undefined;
  if (parts.length === 5 && !isValidName(parts[0]!)) return undefined;
  const [module, part, dir, key] = parts.slice(-4) as [string, string, string, string];
  if (!isValidName(module) || !BINDING_KEY_PATTERN.test(key)) return undefined;
  const generations = /^\.(.+)\.generations$/.exec(part);
  let requirement: string | undefined;
  if (generations) requirement = isValidName(generations[1]!) && !dir.startsWith(".") ? parseBindingGenerationDir(dir)?.requirement : undefined;
  else if (isValidName(part)) requirement = isValidName(dir) ? dir : dir.startsWith(".") ? parseBindingGenerationDir(dir)?.requirement : undefined;
  return requirement ? { module, requirement, key } : undefined;
}

/** True when `a` and `b` are the same file: the same resolved path, or the same inode (a hard link, a bind mount). */
function sameFile(a: string, b: string): boolean {
  if (a === b) return true;
  try {
    const [x, y] = [statSync(a), statSync(b)];
    return x.dev === y.dev && x.ino === y.ino;
  } catch {
    return false;
  }
}

/**
 * Why the default rule refuses `doc`'s `passwordFile` (`shown` as written, `real` resolved), or
 * undefined when it is none of the mesh's own files or one of the two exceptions.
 */
function ownFileRefusal(doc: ProviderDoc, shown: string, real: string, policy: AdminPasswordPolicy, resolvePath: (p: string) => string): string | undefined {
  if (policy.masterKeyFiles.some((k) => sameFile(resolvePath(k), real))) return `${shown} is the mesh's master key: ${OWN_FILE_RULE}; ${FILE_FIX}`;
  const operatorDir = policy.operatorDirs.map(resolvePath).find((dir) => isWithin(real, dir));
  if (operatorDir !== undefined) {
    if (real !== join(operatorDir, OPERATOR_ADMIN_CREDS)) {
      return `${shown} is in the mesh's operator directory ${operatorDir} (its signing keys, identity keys and JWTs): ${OWN_FILE_RULE}; ${FILE_FIX}`;
    }
    const others = doc.serves.filter((k) => !servedByNats(k, doc.endpoint));
    if (others.length === 0) return undefined;
    return (
      `${shown} is the operator admin's .creds, which only a provider serving NATS kinds alone (${NATS_KINDS.join(", ")}) may use, as a .creds whose seed is never sent; ` +
      `this one also serves ${others.join(", ")}, whose adapters would send it as a password: ${FILE_FIX}`
    );
  }
  const root = policy.bindingsRoots.map(resolvePath).find((r) => isWithin(real, r));
  if (root !== undefined) {
    const grant = bindingGrantOf(real, root);
    if (grant && (doc.needs ?? []).some((id) => parseGrantId(id)?.module === grant.module && parseGrantId(id)?.requirement === grant.requirement))
      return undefined;
    return grant
      ? `${shown} is a file of the binding of grant ${grant.module}/${grant.requirement}, which this provider does not need: list ${grant.module}/${grant.requirement} in its needs if its admin password is that mesh secret (docs/bootstrap.md, "Provider dependencies"), or ${FILE_FIX}`
      : `${shown} is in the bindings root ${root} but is not a binding file (<module>/<part>/<requirement>/<key>) of a grant this provider needs: ${OWN_FILE_RULE}; name a binding file of a grant in its needs, or ${FILE_FIX}`;
  }
  const state = resolvePath(policy.stateDir);
  if (isWithin(real, state)) return `${shown} is in the mesh's own directory ${state}: ${OWN_FILE_RULE}; ${FILE_FIX}`;
  return undefined;
}

/** Why `doc`'s `passwordFile` is refused: by the default rule, then by `MESH_ADMIN_PASSWORD_FILES`, which narrows the exceptions too. */
function fileRefusal(doc: ProviderDoc, file: string, policy: AdminPasswordPolicy, resolvePath: (p: string) => string): string | undefined {
  const real = resolvePath(file);
  const shown = real === file ? JSON.stringify(file) : `${JSON.stringify(file)} (${real})`;
  const own = ownFileRefusal(doc, shown, real, policy, resolvePath);
  if (own) return own;
  if (policy.fileDirs && !policy.fileDirs.some((d) => isWithin(real, resolvePath(d)))) {
    return `${shown} is not under a path the services allow (MESH_ADMIN_PASSWORD_FILES: ${policy.fileDirs.join(":")}): put it under one of them, or have the services' operator add its directory`;
  }
  return undefined;
}

/**
 * Whether `doc`'s admin password source may be read under `policy`: undefined when it may (or
 * it names none), else the field and a message with the rule and what to do. `resolvePath`
 * resolves a path as the kernel would (default {@link realPath} from `policy.cwd`); it is
 * applied to the policy's paths too.
 */
export function checkAdminPassword(
  doc: ProviderDoc,
  policy: AdminPasswordPolicy,
  resolvePath: (p: string) => string = (p) => realPath(p, policy.cwd),
): AdminPasswordProblem | undefined {
  const env = doc.admin?.passwordEnv;
  if (env) {
    const why = envNameRefusal(env);
    if (why) return { path: "admin.passwordEnv", message: `${env} ${why}: ${PASSWORD_ENV_RULE}; name a variable of its own, such as PG_ADMIN_PASSWORD` };
    if (policy.envNames && !policy.envNames.includes(env)) {
      return {
        path: "admin.passwordEnv",
        message: `${env} is not a variable the services allow (MESH_ADMIN_PASSWORD_ENVS: ${policy.envNames.join(", ")}): name one of those, or have the services' operator add it`,
      };
    }
  }
  const file = doc.admin?.passwordFile;
  if (file) {
    const why = fileRefusal(doc, file, policy, resolvePath);
    if (why) return { path: "admin.passwordFile", message: why };
  }
  return undefined;
}

/** The mesh secret a provider's admin password is: a grant in its `needs` and the binding key its `passwordFile` reads. */
export interface AdminSecretRef {
  /** `<module>/<requirement>`. */
  grant: string;
  module: string;
  requirement: string;
  /** The binding key the file holds (`value` for a `secret`). */
  key: string;
}

/**
 * Which mesh secret `doc`'s admin password is (docs/bootstrap.md, "Provider dependencies"): its
 * `admin.passwordFile` is a binding file, under one of `policy`'s bindings roots, of a grant
 * its `needs` lists. Undefined for any other source (an env var, a file of its own). Paths are
 * resolved as in {@link checkAdminPassword}.
 */
export function adminSecretOf(
  doc: ProviderDoc,
  policy: AdminPasswordPolicy,
  resolvePath: (p: string) => string = (p) => realPath(p, policy.cwd),
): AdminSecretRef | undefined {
  const file = doc.admin?.passwordFile;
  if (!file || !doc.needs?.length) return undefined;
  const real = resolvePath(file);
  const root = policy.bindingsRoots.map(resolvePath).find((r) => isWithin(real, r));
  const found = root === undefined ? undefined : bindingGrantOf(real, root);
  if (!found) return undefined;
  const grant = `${found.module}/${found.requirement}`;
  return doc.needs.includes(grant) ? { grant, ...found } : undefined;
}
