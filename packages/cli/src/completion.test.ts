import { describe, expect, it } from "vitest";
import { completionScript, parseShell, plainNames, type CompletedCommand } from "./completion.js";

const rotate: CompletedCommand = {
  name: "rotate",
  aliases: [],
  options: ["--timeout", "--json", "--output", "-o"],
  valueOptions: ["--timeout", "--output", "-o"],
  fileOptions: [],
  choices: { "--output": ["json", "yaml"], "-o": ["json", "yaml"] },
  names: "grants",
};

describe("completion scripts", () => {
  it("refuses a shell it has no script for, as wrong usage", () => {
    expect(() => parseShell("tcsh")).toThrow(/no script for "tcsh"; give one of bash, zsh, fish/);
    expect(parseShell("zsh")).toBe("zsh");
  });

  it("asks meshctl for the grants a command's argument names, in each shell", () => {
    expect(completionScript("bash", [rotate])).toContain("$(meshctl __complete grants 2>/dev/null)");
    expect(completionScript("zsh", [rotate])).toMatch(/^autoload -U \+X bashcompinit && bashcompinit$/m);
    const fish = completionScript("fish", [rotate]);
    expect(fish).toContain('complete -c meshctl -f -n "__fish_seen_subcommand_from rotate" -a "(meshctl __complete grants 2>/dev/null)"');
    expect(fish).toContain('complete -c meshctl -n "__fish_seen_subcommand_from rotate" -l output -x -a "json yaml"');
  });

  it("holds only plain words: a name that would be shell syntax is refused, not written", () => {
    expect(() => completionScript("bash", [{ ...rotate, name: "rotate; rm -rf ~" }])).toThrow(/is not a plain word/);
    expect(() => completionScript("fish", [{ ...rotate, choices: { "--output": ["$(id)"] } }])).toThrow(/is not a plain word/);
  });

  it("hands the shell only names that are plain words, which compgen -W cannot run", () => {
    expect(plainNames(["shop/db", "pg-main", "a.b=c", "$(rm -rf ~)", "`id`", "two words", "-o", ""])).toEqual(["shop/db", "pg-main", "a.b=c"]);
  });
});
