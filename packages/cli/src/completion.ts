/**
 * `meshctl completion bash|zsh|fish`: a shell's completion script, written from meshctl's own
 * command definitions (program.ts), so a new command or option completes with no edit here.
 * Names that live in the mesh (modules, grants, providers) are asked of meshctl itself when the
 * user presses Tab: `meshctl __complete modules|grants|providers` prints them, one a line, and
 * nothing at all when it cannot reach the mesh within a second or two.
 */
import { CliError } from "./cli-error.js";
import { ExitCodes } from "./exit-codes.js";

export const Shells = ["bash", "zsh", "fish"] as const;
export type Shell = (typeof Shells)[number];

/** What a command's first argument names, for completing it from the mesh. */
export const CompletedNames = ["modules", "grants", "providers"] as const;
export type CompletedName = (typeof CompletedNames)[number];

/** One command as completion sees it: its names, its options, and what its arguments are. */
export interface CompletedCommand {
  name: string;
  aliases: string[];
  /** Every option, long and short (`--json`, `-o`). */
  options: string[];
  /** Options that take a value (`--timeout 30s`): the word after one is not an argument. */
  valueOptions: string[];
  /** Options that take a file (`-f`), completed with file names. */
  fileOptions: string[];
  /** Options with fixed values (`-o`: json, yaml), by each spelling of the option. */
  choices: Record<string, string[]>;
  /** The words the first argument may be (`get`: modules, grants, providers), if fixed. */
  firstWords?: string[];
  /** What the first argument names in the mesh, completed by asking meshctl. */
  names?: CompletedName;
}

/**
 * The names among `names` a shell may be handed for completion. bash's `compgen -W` expands each
 * word it is given, command substitution included, so a name is passed on only when it is a plain
 * word: what the mesh's names are (KV keys), and nothing a store written to by other means could
 * turn into a command.
 */
export function plainNames(names: Iterable<string>): string[] {
  return [...names].filter((n) => /^[A-Za-z0-9][A-Za-z0-9_./=-]*$/.test(n));
}

export function parseShell(word: string): Shell {
  if ((Shells as readonly string[]).includes(word)) return word as Shell;
  throw new CliError(`meshctl completion: no script for ${JSON.stringify(word)}; give one of ${Shells.join(", ")}`, ExitCodes.Usage);
}

/** Words a shell script may hold as they are: names of commands and options, never user input. */
function checked(words: string[]): string {
  for (const w of words) if (!/^[A-Za-z0-9_./@-]+$/.test(w)) throw new Error(`completion: ${JSON.stringify(w)} is not a plain word`);
  return words.join(" ");
}

/** The completion script of `shell` for `commands`, for the program called `bin`. */
export function completionScript(shell: Shell, commands: CompletedCommand[], bin = "meshctl"): string {
  if (shell === "fish") return fishScript(commands, bin);
  const fn = `_${bin.replace(/[^A-Za-z0-9_]/g, "_")}_complete`;
  const lines = [
    `# ${bin} completion for ${shell}: ${shell === "zsh" ? "source <(meshctl completion zsh) in ~/.zshrc" : "source <(meshctl completion bash) in ~/.bashrc"}`,
    ...(shell === "zsh" ? ["autoload -U +X bashcompinit && bashcompinit"] : []),
    `${fn}() {`,
    '  local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}" cmd="${COMP_WORDS[1]}"',
    "  COMPREPLY=()",
    "  if [[ $COMP_CWORD -eq 1 ]]; then",
    `    COMPREPLY=( $(compgen -W "${checked(commands.flatMap((c) => [c.name, ...c.aliases]))}" -- "$cur") )`,
    "    return",
    "  fi",
    // How many arguments come before the word completed: words that are neither an option nor an option's value.
    "  local i arg=0",
    "  for ((i = 2; i < COMP_CWORD; i++)); do",
    `    case "\${COMP_WORDS[i]}" in ${checked([...new Set(commands.flatMap((c) => c.valueOptions))]).replace(/ /g, "|")}) i=$((i + 1)) ;; -*) ;; *) arg=$((arg + 1)) ;; esac`,
    "  done",
    '  case "$cmd" in',
  ];
  for (const c of commands) {
    lines.push(`    ${checked([c.name, ...c.aliases]).replace(/ /g, "|")})`);
    const choices = Object.entries(c.choices);
    if (c.fileOptions.length || choices.length) {
      lines.push('      case "$prev" in');
      for (const [option, values] of choices) lines.push(`        ${checked([option])}) COMPREPLY=( $(compgen -W "${checked(values)}" -- "$cur") ); return ;;`);
      if (c.fileOptions.length) lines.push(`        ${checked(c.fileOptions).replace(/ /g, "|")}) COMPREPLY=( $(compgen -f -- "$cur") ); return ;;`);
      lines.push("      esac");
    }
    lines.push(`      if [[ $cur == -* ]]; then COMPREPLY=( $(compgen -W "${checked(c.options)}" -- "$cur") ); return; fi`);
    if (c.firstWords) lines.push(`      [[ $arg -eq 0 ]] && COMPREPLY=( $(compgen -W "${checked(c.firstWords)}" -- "$cur") )`);
    if (c.names) lines.push(`      [[ $arg -eq 0 ]] && COMPREPLY=( $(compgen -W "$(${bin} __complete ${c.names} 2>/dev/null)" -- "$cur") )`);
    if (c.firstWords && c.name === "get")
      // get RESOURCE NAME: the name of the resource given.
      lines.push(`      [[ $arg -eq 1 ]] && COMPREPLY=( $(compgen -W "$(${bin} __complete "\${COMP_WORDS[2]}" 2>/dev/null)" -- "$cur") )`);
    lines.push("      ;;");
  }
  lines.push("  esac", "}", `complete -o default -F ${fn} ${bin}`, "");
  return lines.join("\n");
}

function fishScript(commands: CompletedCommand[], bin: string): string {
  const all = checked(commands.flatMap((c) => [c.name, ...c.aliases]));
  const lines = [
    `# ${bin} completion for fish: meshctl completion fish > ~/.config/fish/completions/${bin}.fish`,
    `complete -c ${bin} -f -n "__fish_use_subcommand" -a "${all}"`,
  ];
  for (const c of commands) {
    const when = `__fish_seen_subcommand_from ${checked([c.name, ...c.aliases])}`;
    for (const o of c.options.filter((o) => o.startsWith("--"))) {
      const values = c.choices[o];
      const takesFile = c.fileOptions.includes(o);
      lines.push(`complete -c ${bin} -n "${when}" -l ${checked([o.slice(2)])}${values ? ` -x -a "${checked(values)}"` : takesFile ? " -r -F" : ""}`);
    }
    if (c.firstWords) lines.push(`complete -c ${bin} -f -n "${when}" -a "${checked(c.firstWords)}"`);
    if (c.names) lines.push(`complete -c ${bin} -f -n "${when}" -a "(${bin} __complete ${c.names} 2>/dev/null)"`);
  }
  lines.push("");
  return lines.join("\n");
}
