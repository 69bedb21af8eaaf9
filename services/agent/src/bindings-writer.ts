/**
 * Writes a part's bindings under a bindings root, in the servicebinding.io layout:
 *
 *     <root>/<module>/<part>/<binding>/<key>           one entry per binding and nothing else: the part's SERVICE_BINDING_ROOT
 *     <root>/<module>/<part>.env                       every binding of the part, for process managers
 *     <root>/<module>/.<part>.generations/             generation directories, temporary links and files,
 *                                                      and each binding's env mapping (.env-names-<binding>.json)
 *
 * `<binding>` (a requirement's name, or `identity`) is a symlink to
 * `../.<part>.generations/<binding>-g<generation>-<random>`, the directory holding the files
 * (`type` and the binding's keys). Readers that walk every entry of the part's directory (the
 * untyped `getBinding()` of `kube-service-bindings`, `pyservicebinding`) meet one directory per
 * binding: no env file, no hidden directory, no older generation. A new generation is written
 * into a fresh directory there, then a temporary symlink to it (made in the generations
 * directory, on the same file system) is renamed over `<binding>` (rename(2) replaces a symlink
 * atomically, across directories too), then the previous directory is removed (after a grace,
 * see below) — the kubelet AtomicWriter's scheme. A reader that opens `<binding>/<key>` sees the
 * old file or the new one, never a missing or half-written one.
 *
 * One difference from kubelet, and why: a replaced directory is removed only once it has been
 * out of use for a grace period (default {@link DEFAULT_GRACE_MS}), by the next write of the
 * binding or by {@link pruneBinding}. A reader that followed the old symlink just before a
 * swap still has to look up `<key>` in the old directory; if the reader's thread is
 * descheduled in between (seen here, on two busy cores, for the time of several swaps),
 * removing the directory at once makes the reader fail with ENOENT. Measured here with a
 * reader thread in a tight loop: 1 to 12 failed reads per 20,000 swaps with immediate removal,
 * about 40 per 40,000 in some runs when keeping just the one previous directory, none in
 * 40,000 swaps with the time-based grace.
 *
 * Agents before this layout kept the generation directories (`.<binding>-g<k>-<random>`) and
 * `part.env` inside the part's directory; {@link migrateBindings} moves such a tree over, and
 * every write removes what is left of it (hidden directories after their grace).
 *
 * The functions here are synchronous on purpose: within one process, two writes to the same
 * part (and their regeneration of its env file) can never interleave. Two processes writing
 * one root are not supported (one agent per node).
 */
import {
  chmodSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  readlinkSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { randomBytes } from "node:crypto";
import { basename, join } from "node:path";
import {
  BINDING_KEY_PATTERN,
  ErrorCodes,
  ENV_NAME_PATTERN,
  MeshError,
  NAME_RULE,
  mappedEnv,
  type EnvMapping,
  bindingGenerationDirPattern,
  bindingGenerationsDirName,
  isValidName,
  parseBindingGenerationDir,
  partEnvFileName,
} from "@mesh/shared";

export { BINDING_KEY_PATTERN };

/** How long a replaced generation's directory stays for readers still in it. */
export const DEFAULT_GRACE_MS = 2_000;

/** One requirement's binding of one part, as {@link writeBinding} takes it. */
export interface BindingWrite {
  /** The bindings root (created if missing). */
  root: string;
  module: string;
  part: string;
  /** The binding's name: the requirement's, or `identity` for the part's identity. */
  requirement: string;
  /** Credential generation, a positive integer; recorded in the generation directory's name. */
  generation: number;
  /** Key → value; one file per key. Secret: never logged. */
  values: Readonly<Record<string, string>>;
  /** The requirement's `env` (variable → key): more names of the env file for its values; none when left out. */
  env?: EnvMapping;
}

export interface BindingWriteResult {
  /** `<root>/<module>/<part>/<binding>`, the path a module reads. */
  path: string;
  /** `<root>/<module>/<part>.env`. */
  envFile: string;
  /** False when this generation with these exact values was already in place (nothing swapped). */
  changed: boolean;
  /**
   * True when replaced directories were left for readers still in them (see the file
   * comment); call {@link pruneBinding} after the grace to remove them.
   */
  retained: boolean;
  /** Env names that more than one requirement/key map to (`a-b`+`c` and `a`+`b-c`); the first in sorted order is kept. */
  envCollisions: string[];
  /** Variables an `env` mapping names whose key no binding of the part carries: not in the env file. */
  envUnmapped: string[];
}

/** What regenerating a part's env file found: where it is, and the names it could not give as asked. */
export interface PartEnvResult {
  envFile: string;
  envCollisions: string[];
  envUnmapped: string[];
}

function refuse(what: string, value: string, rule: string): never {
  throw new MeshError(ErrorCodes.InvalidName, `${what} ${JSON.stringify(value)} ${rule}`);
}

function checkName(what: string, value: string): void {
  if (!isValidName(value)) refuse(what, value, NAME_RULE);
}

/**
 * `<root>/<module>/<part>`: the directory a part's servicebinding.io reader takes as
 * `SERVICE_BINDING_ROOT`; it holds one entry per binding. Throws `InvalidName` for a name that
 * could leave the root.
 */
export function partBindingsDir(root: string, module: string, part: string): string {
  checkName("module", module);
  checkName("part", part);
  return join(root, module, part);
}

/** `<root>/<module>/<part>.env`, the part's env file; throws `InvalidName` like {@link partBindingsDir}. */
export function partEnvFile(root: string, module: string, part: string): string {
  checkName("module", module);
  checkName("part", part);
  return join(root, module, partEnvFileName(part));
}

/** `<root>/<module>/<part>/<binding>`; throws `InvalidName` for a name that could leave the root. */
export function bindingPath(root: string, module: string, part: string, requirement: string): string {
  checkName("requirement", requirement);
  return join(partBindingsDir(root, module, part), requirement);
}

/** The directory of a part's generation directories, beside its bindings directory. */
function generationsDir(root: string, module: string, part: string): string {
  return join(root, module, bindingGenerationsDirName(part));
}

/** What `<part>/<binding>` points to for generation directory `name`. */
function linkTarget(part: string, name: string): string {
  return `../${bindingGenerationsDirName(part)}/${name}`;
}

/** Temporary symlink names of `binding`, in the generations directory (a leading `.` never starts a generation's name). */
function tempLinkPrefix(binding: string): string {
  return `.link-${binding}-`;
}

/** Temporary files of the env file's regeneration, in the generations directory. */
const TEMP_ENV_PREFIX = ".env-tmp-";

/** A binding's `env` mapping as its env file was last written with, in the generations directory (a leading `.` never starts a generation's name). */
const envNamesFile = (binding: string) => `.env-names-${binding}.json`;

/** The `env` mapping stored for `binding` of the part; none when there is none (or it is unreadable: the env file then has only the plain names). */
function readEnvNames(genDir: string, binding: string): EnvMapping | undefined {
  try {
    const parsed = JSON.parse(readFileSync(join(genDir, envNamesFile(binding)), "utf8")) as unknown;
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) return undefined;
    return Object.fromEntries(Object.entries(parsed).filter((e): e is [string, string] => typeof e[1] === "string"));
  } catch {
    return undefined;
  }
}

/** Stores `binding`'s `env` mapping (atomically: a temporary file renamed over it), or removes it for none. */
function storeEnvNames(genDir: string, binding: string, env: EnvMapping | undefined): void {
  const path = join(genDir, envNamesFile(binding));
  if (!env || Object.keys(env).length === 0) {
    rmSync(path, { force: true });
    return;
  }
  const text = JSON.stringify(env);
  try {
    if (readFileSync(path, "utf8") === text) return;
  } catch {
    // Not there yet.
  }
  const temp = join(genDir, `${TEMP_ENV_PREFIX}${randomBytes(6).toString("hex")}`);
  writeFileSync(temp, text, { mode: 0o600, flag: "wx" });
  renameSync(temp, path);
}

/**
 * Sets the `env` mapping of a binding already in place and regenerates the part's env file: a
 * requirement whose `env` changed while its generation did not. Nothing is done for a binding
 * that is not there.
 */
export function setBindingEnv(root: string, module: string, part: string, requirement: string, env: EnvMapping | undefined): PartEnvResult | undefined {
  if (!lstatOrUndefined(bindingPath(root, module, part, requirement))?.isSymbolicLink()) return undefined;
  storeEnvNames(generationsDir(root, module, part), requirement, env);
  const written = writePartEnv(root, module, part);
  return { envFile: written.path, envCollisions: written.collisions, envUnmapped: written.unmapped };
}

/** What agents before the generations directory left in a part's directory. */
const Legacy = {
  envFile: "part.env",
  tempEnvPrefix: ".part.env.tmp-",
  tempLinkPrefix: (binding: string) => `.${binding}.link-`,
  generationDir: (binding: string) => new RegExp(`^\\.${binding}-g(\\d+)-[A-Za-z0-9]{6}$`),
} as const;

function readLink(path: string): string | undefined {
  try {
    return readlinkSync(path);
  } catch {
    return undefined;
  }
}

/**
 * Where a binding's symlink target lies and which generation it names: `current` in the
 * generations directory, `legacy` in the part's own directory (an agent before that one).
 */
function targetOf(part: string, binding: string, target: string | undefined): { generation: number; name: string; legacy: boolean } | undefined {
  if (target === undefined) return undefined;
  const prefix = `../${bindingGenerationsDirName(part)}/`;
  if (target.startsWith(prefix)) {
    const name = target.slice(prefix.length);
    const m = bindingGenerationDirPattern(binding).exec(name);
    return m ? { generation: Number(m[1]), name, legacy: false } : undefined;
  }
  const m = Legacy.generationDir(binding).exec(target);
  return m ? { generation: Number(m[1]), name: target, legacy: true } : undefined;
}

/**
 * The generation currently in place at `<root>/<module>/<part>/<binding>`, from the name of
 * the directory its symlink points to; undefined when nothing (or something else) is there.
 */
export function bindingGeneration(root: string, module: string, part: string, requirement: string): number | undefined {
  return targetOf(part, requirement, readLink(bindingPath(root, module, part, requirement)))?.generation;
}

function validateWrite(w: BindingWrite): void {
  checkName("module", w.module);
  checkName("part", w.part);
  checkName("requirement", w.requirement);
  if (!Number.isSafeInteger(w.generation) || w.generation < 1) {
    throw new MeshError(ErrorCodes.InvalidRequest, `generation must be a positive integer, got ${w.generation}`);
  }
  for (const [key, value] of Object.entries(w.values)) {
    if (!BINDING_KEY_PATTERN.test(key)) refuse("binding key", key, "must be letters, digits, '_', '-' and inner dots, starting with a lower-case letter");
    if (typeof value !== "string") throw new MeshError(ErrorCodes.InvalidRequest, `binding key ${key} of ${w.requirement} has no string value`);
    // The value itself is never quoted in a message.
    if (value.includes("\0"))
      throw new MeshError(ErrorCodes.InvalidRequest, `binding key ${key} of ${w.requirement} holds a NUL byte, which no file reader or env file can carry`);
  }
}

/** The key → value map of a binding directory (files matching the key pattern only). */
function readValues(dir: string): Map<string, string> | undefined {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return undefined;
  }
  const out = new Map<string, string>();
  for (const name of names.sort()) {
    if (BINDING_KEY_PATTERN.test(name)) out.set(name, readFileSync(join(dir, name), "utf8"));
  }
  return out;
}

function sameValues(current: Map<string, string> | undefined, values: Readonly<Record<string, string>>): boolean {
  if (!current) return false;
  const entries = Object.entries(values);
  return current.size === entries.length && entries.every(([k, v]) => current.get(k) === v);
}

function ensureDir(path: string): void {
  mkdirSync(path, { recursive: true, mode: 0o700 });
  chmodSync(path, 0o700);
}

/**
 * Writes one binding of one part atomically (see the file comment), removes replaced
 * generations' directories whose grace (`graceMs`, default {@link DEFAULT_GRACE_MS}) has
 * passed and leftovers of interrupted writes (and of the layout before the generations
 * directory), and regenerates the part's env file.
 * Idempotent: writing the generation and values already in place swaps nothing
 * (`changed: false`) and only makes sure the env file agrees.
 *
 * `onlyOver` (for {@link migrateBindings}): swap only while the symlink still reads this target;
 * otherwise write nothing (`changed: false`).
 *
 * Throws `InvalidName` for a module, part, requirement or key that could escape the root or
 * is not a plain name, and `InvalidRequest` for a bad generation or value; nothing is written then.
 */
export function writeBinding(w: BindingWrite, opts: { graceMs?: number; now?: Date; onlyOver?: string } = {}): BindingWriteResult {
  validateWrite(w);
  const partDir = join(w.root, w.module, w.part);
  const genDir = generationsDir(w.root, w.module, w.part);
  const linkPath = join(partDir, w.requirement);
  mkdirSync(w.root, { recursive: true, mode: 0o700 });
  ensureDir(join(w.root, w.module));
  ensureDir(partDir);
  ensureDir(genDir);

  const now = opts.now ?? new Date();
  const grace = opts.graceMs ?? DEFAULT_GRACE_MS;
  const previous = targetOf(w.part, w.requirement, readLink(linkPath));
  let changed = true;
  if (previous && !previous.legacy && previous.generation === w.generation && sameValues(readValues(linkPath), w.values)) {
    changed = false;
  } else {
    const dir = mkdtempSync(join(genDir, `${w.requirement}-g${w.generation}-`));
    chmodSync(dir, 0o700);
    for (const [key, value] of Object.entries(w.values)) {
      writeFileSync(join(dir, key), value, { mode: 0o600, flag: "wx" });
    }
    // Made outside the part's directory, so a reader listing it never meets the temporary link.
    const tempLink = join(genDir, tempLinkPrefix(w.requirement) + randomBytes(6).toString("hex"));
    symlinkSync(linkTarget(w.part, basename(dir)), tempLink);
    // Moving an old layout over: another agent sharing the root may have written this binding meanwhile.
    if (opts.onlyOver !== undefined && readLink(linkPath) !== opts.onlyOver) {
      rmSync(tempLink, { force: true });
      rmSync(dir, { recursive: true, force: true });
      return { path: linkPath, envFile: join(w.root, w.module, partEnvFileName(w.part)), changed: false, envCollisions: [], envUnmapped: [], retained: false };
    }
    // A real directory there (not ours) cannot be replaced by rename; move it out of the way first.
    const st = lstatOrUndefined(linkPath);
    if (st && !st.isSymbolicLink()) rmSync(linkPath, { recursive: true, force: true });
    renameSync(tempLink, linkPath);
    // Its mtime now says when it went out of use; the grace counts from there.
    if (previous) {
      try {
        utimesSync(join(previous.legacy ? partDir : genDir, previous.name), now, now);
      } catch {
        // Gone already: nothing to keep.
      }
    }
  }

  const retained = removeStale(w.root, w.module, w.part, w.requirement, cutoff(now, grace));
  storeEnvNames(genDir, w.requirement, w.env);
  const env = writePartEnv(w.root, w.module, w.part);
  return { path: linkPath, envFile: env.path, changed, envCollisions: env.collisions, envUnmapped: env.unmapped, retained };
}

/**
 * Writes generation `fetched` of a grant into `binding` of `module`'s `part`, its env file
 * with the requirement's `env`: what a delivery, a rotation and a restore of a lost binding write.
 */
export function writeFetchedBinding(
  root: string,
  at: { module: string; part: string; binding: string },
  fetched: { generation: number; values: Readonly<Record<string, string>> },
  env: EnvMapping | undefined,
  graceMs: number,
): BindingWriteResult {
  return writeBinding(
    { root, module: at.module, part: at.part, requirement: at.binding, generation: fetched.generation, values: fetched.values, ...(env ? { env } : {}) },
    { graceMs },
  );
}

/**
 * Removes the temporary links of `binding`, and its generation directories other than the one
 * its symlink points to that went out of use before `before` (ms since the epoch), in the
 * generations directory and (left by an older agent) in the part's directory. Returns whether
 * any generation directory was left.
 */
function removeStale(root: string, module: string, part: string, binding: string, before: number): boolean {
  const partDir = join(root, module, part);
  const current = targetOf(part, binding, readLink(join(partDir, binding)));
  let left = false;
  const sweep = (dir: string, legacy: boolean) => {
    const tempPrefix = legacy ? Legacy.tempLinkPrefix(binding) : tempLinkPrefix(binding);
    const pattern = legacy ? Legacy.generationDir(binding) : bindingGenerationDirPattern(binding);
    let entries: string[];
    try {
      entries = readdirSync(dir);
    } catch {
      return;
    }
    for (const entry of entries) {
      if (current && current.legacy === legacy && entry === current.name) continue;
      const path = join(dir, entry);
      if (entry.startsWith(tempPrefix)) {
        rmSync(path, { force: true });
      } else if (pattern.test(entry)) {
        let mtime: number;
        try {
          mtime = statSync(path).mtimeMs;
        } catch {
          continue;
        }
        if (mtime < before) rmSync(path, { recursive: true, force: true });
        else left = true;
      }
    }
  };
  sweep(generationsDir(root, module, part), false);
  sweep(partDir, true);
  return left;
}

/**
 * Removes the directories of one binding's replaced generations (and leftovers of interrupted
 * writes) that have been out of use for at least `graceMs` (default {@link DEFAULT_GRACE_MS};
 * 0 removes all but the current one). Returns true when some were left because their grace
 * has not passed. Safe to call at any time, also for a binding that does not exist.
 */
export function pruneBinding(root: string, module: string, part: string, requirement: string, opts: { graceMs?: number; now?: Date } = {}): boolean {
  bindingPath(root, module, part, requirement);
  if (!lstatOrUndefined(join(root, module, part))?.isDirectory()) return false;
  return removeStale(root, module, part, requirement, cutoff(opts.now ?? new Date(), opts.graceMs ?? DEFAULT_GRACE_MS));
}

/**
 * Removes one binding from a part's directory: its link, every generation's directory and any
 * leftover of an interrupted write, and rewrites the part's env file without it. Returns
 * whether anything of it was there. Safe to call again, and for a binding never written.
 */
export function removeBinding(root: string, module: string, part: string, requirement: string): { removed: boolean } {
  const linkPath = bindingPath(root, module, part, requirement);
  if (!lstatOrUndefined(join(root, module, part))?.isDirectory()) return { removed: false };
  const had = lstatOrUndefined(linkPath) !== undefined;
  rmSync(linkPath, { recursive: true, force: true });
  // With the link gone no generation is current: every one of them goes, whatever its age.
  removeStale(root, module, part, requirement, Infinity);
  rmSync(join(generationsDir(root, module, part), envNamesFile(requirement)), { force: true });
  writePartEnv(root, module, part);
  return { removed: had };
}

/** Directories out of use since before this time (ms) are removed; a grace of 0 removes all. */
function cutoff(now: Date, graceMs: number): number {
  return graceMs <= 0 ? Infinity : now.getTime() - graceMs;
}

function lstatOrUndefined(path: string) {
  try {
    return lstatSync(path);
  } catch {
    return undefined;
  }
}

function validNames(dir: string): string[] {
  try {
    return readdirSync(dir).filter(isValidName).sort();
  } catch {
    return [];
  }
}

/** One binding of one part, as {@link migrateBindings} reports it. */
export interface PartBinding {
  module: string;
  part: string;
  binding: string;
}

/**
 * Moves a bindings root written by an agent before the generations directory (generation
 * directories `.<binding>-g<k>-<random>` and `part.env` inside the part's directory) to the
 * current layout: each binding is written again, at its generation and with its values, into
 * the generations directory and swapped atomically; `part.env` becomes `<part>.env` beside the
 * part's directory. The old generation directories stay for the grace (readers may still be
 * in them) and are removed by the next write or {@link pruneBinding}: `retained` lists the
 * bindings to prune then. A root in the current layout is left as it is. Several agents sharing
 * one root may each run it: a binding is swapped only while its symlink still names the old
 * directory it read, so one another agent wrote meanwhile is never moved back.
 */
export function migrateBindings(root: string, opts: { graceMs?: number; now?: Date } = {}): { migrated: PartBinding[]; retained: PartBinding[] } {
  const migrated: PartBinding[] = [];
  const retained: PartBinding[] = [];
  for (const module of validNames(root)) {
    if (!lstatOrUndefined(join(root, module))?.isDirectory()) continue;
    for (const part of validNames(join(root, module))) {
      const partDir = join(root, module, part);
      if (!lstatOrUndefined(partDir)?.isDirectory()) continue;
      const entries = readdirSync(partDir);
      if (!entries.some((e) => e.startsWith(".") || e === Legacy.envFile)) continue;
      for (const binding of entries.filter(isValidName).sort()) {
        const target = targetOf(part, binding, readLink(join(partDir, binding)));
        if (!target?.legacy) continue;
        const values = readValues(join(partDir, binding));
        if (!values) continue;
        const moved = writeBinding(
          { root, module, part, requirement: binding, generation: target.generation, values: Object.fromEntries(values) },
          { ...opts, onlyOver: target.name },
        );
        if (moved.changed) migrated.push({ module, part, binding });
      }
      // Hidden directories of bindings no symlink names any more, and a part.env alone, too.
      const bindings = new Set(entries.filter(isValidName));
      for (const e of entries) {
        const legacy = e.startsWith(".") ? parseBindingGenerationDir(e) : undefined;
        if (legacy) bindings.add(legacy.requirement);
      }
      for (const binding of [...bindings].sort()) {
        if (removeStale(root, module, part, binding, cutoff(opts.now ?? new Date(), opts.graceMs ?? DEFAULT_GRACE_MS)))
          retained.push({ module, part, binding });
      }
      ensureDir(generationsDir(root, module, part));
      writePartEnv(root, module, part);
    }
  }
  return { migrated, retained };
}

/** `REQUIREMENT_KEY` in upper snake case: `db` + `password` → `DB_PASSWORD`, `session-key` + `value` → `SESSION_KEY_VALUE`, `cert` + `tls.crt` → `CERT_TLS_CRT`. */
export function envName(requirement: string, key: string): string {
  return `${requirement}_${key}`
    .replace(/([a-z0-9])([A-Z])/g, "$1_$2")
    .replace(/[-.]/g, "_")
    .toUpperCase();
}

/**
 * Quotes a value so that systemd's `EnvironmentFile=` and a POSIX shell (`set -a; . ./part.env`)
 * both read back exactly the value: in single quotes when it holds no `'` (both take the text
 * verbatim, newlines included), otherwise in double quotes with `\`, `"`, `$` and `` ` ``
 * escaped by a backslash (the escapes both recognise inside double quotes). Not for
 * `docker --env-file`, which takes no quoting at all.
 */
export function quoteEnvValue(value: string): string {
  if (!value.includes("'")) return `'${value}'`;
  return `"${value.replace(/[\\"$`]/g, (c) => `\\${c}`)}"`;
}

/**
 * The text of a part's env file from its requirements' values: first the names each
 * requirement's `env` maps (sorted by requirement then name: the names an application asked
 * for win), then one `REQUIREMENT_KEY` line per key, sorted by requirement then key; each value
 * quoted by {@link quoteEnvValue}. A name produced twice keeps the first and is reported in
 * `collisions`; a mapped name whose key the binding lacks, or that is no variable name, is left
 * out and reported in `unmapped`.
 */
export function renderPartEnv(requirements: ReadonlyArray<{ requirement: string; values: ReadonlyMap<string, string>; env?: EnvMapping }>): {
  text: string;
  collisions: string[];
  unmapped: string[];
} {
  const lines = [
    "# Written by the mesh agent; regenerated on every delivery. Do not edit.",
    "# Values are quoted for systemd EnvironmentFile= and POSIX sh (set -a; . ./part.env).",
  ];
  const seen = new Set<string>();
  const collisions: string[] = [];
  const unmapped: string[] = [];
  const add = (name: string, value: string) => {
    if (seen.has(name)) {
      collisions.push(name);
      return;
    }
    seen.add(name);
    lines.push(`${name}=${quoteEnvValue(value)}`);
  };
  const sorted = [...requirements].sort((a, b) => a.requirement.localeCompare(b.requirement));
  for (const r of sorted) {
    const mapped = mappedEnv(r.env, Object.fromEntries(r.values));
    unmapped.push(...mapped.missing);
    for (const [name, value] of Object.entries(mapped.env)) {
      // Checked at apply already; a name that could end its line and start another never reaches the file.
      if (ENV_NAME_PATTERN.test(name)) add(name, value);
      else unmapped.push(name);
    }
  }
  for (const r of sorted) {
    for (const key of [...r.values.keys()].sort()) add(envName(r.requirement, key), r.values.get(key)!);
  }
  return { text: lines.join("\n") + "\n", collisions, unmapped };
}

/**
 * Regenerates `<root>/<module>/<part>.env` from every binding symlink in the part's directory,
 * atomically (a temporary file in the generations directory renamed over it), mode 0600. Leaves
 * the file alone when it already says the same. Removes the `part.env` an older agent kept in
 * the part's directory.
 */
function writePartEnv(root: string, module: string, part: string): { path: string; collisions: string[]; unmapped: string[] } {
  const partDir = join(root, module, part);
  const genDir = generationsDir(root, module, part);
  const requirements: Array<{ requirement: string; values: Map<string, string>; env?: EnvMapping }> = [];
  for (const entry of readdirSync(partDir)) {
    if (!isValidName(entry) || !lstatOrUndefined(join(partDir, entry))?.isSymbolicLink()) continue;
    const values = readValues(join(partDir, entry));
    const env = readEnvNames(genDir, entry);
    if (values) requirements.push({ requirement: entry, values, ...(env ? { env } : {}) });
  }
  const { text, collisions, unmapped } = renderPartEnv(requirements);
  const path = join(root, module, partEnvFileName(part));
  let existing: string | undefined;
  try {
    existing = readFileSync(path, "utf8");
  } catch {
    existing = undefined;
  }
  // Leftover temp files of an interrupted regeneration, and the older agents' env file.
  for (const entry of readdirSync(genDir)) {
    if (entry.startsWith(TEMP_ENV_PREFIX)) rmSync(join(genDir, entry), { force: true });
  }
  if (existing !== text) {
    const temp = join(genDir, `${TEMP_ENV_PREFIX}${randomBytes(6).toString("hex")}`);
    writeFileSync(temp, text, { mode: 0o600, flag: "wx" });
    renameSync(temp, path);
  }
  for (const entry of readdirSync(partDir)) {
    if (entry === Legacy.envFile || entry.startsWith(Legacy.tempEnvPrefix)) rmSync(join(partDir, entry), { force: true });
  }
  return { path, collisions, unmapped };
}
