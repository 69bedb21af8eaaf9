/**
 * The hooks a node's agent allows: what a part's `onRotate` may name. The node's operator gives
 * them on the agent's command line (`--allow-hook NAME=COMMAND`, repeatable) or in
 * `MESH_ALLOW_HOOKS` (`NAME=COMMAND;NAME=COMMAND`); a manifest only picks one by name.
 *
 * COMMAND is an argv, split on whitespace, and run without a shell. Why not `sh -c COMMAND`,
 * which would be as safe (the text is the operator's, never a manifest's): without a shell
 * there is no quoting, expansion or chaining to get wrong, the program that runs is exactly the
 * first word, and `;` is free to separate hooks in one variable. A hook that needs a shell is a
 * script, named by its path. Pure: the program is looked up by {@link resolveHookPrograms}.
 */
import { NAME_RULE, isValidName } from "./names.js";

/** Hook name → argv (the program first: an absolute path, or a bare name looked up in {@link HOOK_PATH}). */
export type AllowedHooks = ReadonlyMap<string, readonly string[]>;

/** What separates hooks in `MESH_ALLOW_HOOKS`. */
export const HOOK_LIST_SEPARATOR = ";";

/**
 * The only `PATH` a hook gets, and where a bare program name is looked up: the system's
 * directories, none of them writable by an unprivileged user on a standard system.
 */
export const HOOK_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/** Characters a shell would interpret: refused, since nothing would interpret them here. */
const SHELL_CHARACTERS = /[;|&<>()$`'"\\*?]/;

/** A refused hook option; `message` says what is wrong and how to write it. */
export class HookOptionError extends Error {
  override readonly name = "HookOptionError";
}

const EXAMPLE = "e.g. --allow-hook reload=/usr/local/bin/reload-app --graceful";

/**
 * Parses one `NAME=COMMAND`. Throws {@link HookOptionError} for: no `=`, a name that breaks the
 * name rule, an empty command, a program given as a relative path, or a character a shell
 * would interpret (`&&`, quotes, `$VAR`, `;`, globs): there is no shell to interpret them.
 */
export function parseAllowHook(spec: string): { name: string; argv: string[] } {
  const eq = spec.indexOf("=");
  if (eq < 0) throw new HookOptionError(`--allow-hook ${JSON.stringify(spec)}: give NAME=COMMAND, ${EXAMPLE}`);
  const name = spec.slice(0, eq).trim();
  const command = spec.slice(eq + 1);
  if (!isValidName(name)) throw new HookOptionError(`--allow-hook ${JSON.stringify(spec)}: the hook name ${JSON.stringify(name)} ${NAME_RULE}`);
  const argv = command.split(/\s+/).filter(Boolean);
  if (argv.length === 0) throw new HookOptionError(`--allow-hook ${name}: no command after ${name}=; ${EXAMPLE}`);
  const bad = SHELL_CHARACTERS.exec(command);
  if (bad) {
    throw new HookOptionError(
      `--allow-hook ${name}: ${JSON.stringify(bad[0])} in ${JSON.stringify(command)}: a hook's command runs without a shell (split on whitespace), so it would reach the program as it is; put what needs a shell in a script and name the script`,
    );
  }
  const program = argv[0]!;
  if (program.includes("/") && !program.startsWith("/")) {
    throw new HookOptionError(
      `--allow-hook ${name}: the program ${JSON.stringify(program)} is a relative path; give an absolute path, or a bare name found in ${HOOK_PATH}`,
    );
  }
  return { name, argv };
}

/** The hooks of `specs` (each `NAME=COMMAND`); a name given twice is refused. */
export function parseAllowedHooks(specs: readonly string[]): Map<string, string[]> {
  const hooks = new Map<string, string[]>();
  for (const spec of specs) {
    const { name, argv } = parseAllowHook(spec);
    if (hooks.has(name)) throw new HookOptionError(`--allow-hook ${name}: given twice; give each hook once`);
    hooks.set(name, argv);
  }
  return hooks;
}

/** The `NAME=COMMAND` entries of a `MESH_ALLOW_HOOKS` value (empty entries are skipped). */
export function splitHookList(value: string | undefined): string[] {
  return (value ?? "")
    .split(HOOK_LIST_SEPARATOR)
    .map((s) => s.trim())
    .filter(Boolean);
}

/** `hooks` as a `MESH_ALLOW_HOOKS` value, which {@link splitHookList} and {@link parseAllowedHooks} read back. */
export function formatHookList(hooks: AllowedHooks): string {
  return [...hooks].map(([name, argv]) => `${name}=${argv.join(" ")}`).join(HOOK_LIST_SEPARATOR);
}

/**
 * The hooks of an agent: `--allow-hook` options when any is given, else `MESH_ALLOW_HOOKS`
 * (as `--node` wins over `MESH_NODE`).
 */
export function allowedHooksOf(options: readonly string[] | undefined, env: NodeJS.ProcessEnv): Map<string, string[]> {
  return parseAllowedHooks(options?.length ? options : splitHookList(env.MESH_ALLOW_HOOKS));
}
