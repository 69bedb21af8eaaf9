/**
 * `-o json|yaml` of every command that prints state, as kubectl and the `nats` CLI spell it;
 * `--json` stays as the alias of `-o json`. A command knows one machine format, JSON: in YAML
 * it prints its JSON to a collecting output, which writes the same document as YAML when the
 * command is done, so the two never say different things. The commands that list (`get`,
 * `status`) also take `-o name` (one `<kind>/<name>` a line) and `get` `-o wide` (more columns).
 */
import { Option } from "commander";
import { stringify } from "yaml";
import type { Output } from "./output.js";

export const OutputFormats = ["json", "yaml", "wide", "name"] as const;
export type OutputFormat = (typeof OutputFormats)[number];

/** What each format prints, for an option's help. */
const FORMAT_HELP: Record<OutputFormat, string> = {
  json: "json",
  yaml: "yaml",
  wide: "wide (a table with more columns)",
  name: "name (<kind>/<name>, one a line)",
};

/** The `-o, --output` option with the formats a command takes (json and yaml by default); commander refuses any other, exit 2. */
export function outputOption(formats: readonly OutputFormat[] = ["json", "yaml"]): Option {
  const choices = formats.map((f) => FORMAT_HELP[f]);
  const listed = `${choices.slice(0, -1).join(", ")} or ${choices.at(-1)!}`;
  return new Option("-o, --output <format>", `print as ${listed} (--json is -o json)`).choices(formats);
}

/** The format a command's options ask for: `-o`, or `--json`; undefined for the human form. */
export function formatOf(o: { json?: boolean; output?: string }): OutputFormat | undefined {
  const asked = OutputFormats.find((f) => f === o.output);
  if (asked) return asked;
  return o.json ? "json" : undefined;
}

/** `<kind>/<name>` of `-o name`, as kubectl prints it. */
export function nameLine(kind: string, name: string): string {
  return `${kind}/${name}`;
}

/**
 * Where a command in `format` writes, and whether it prints JSON: the process's output as it is,
 * or, for YAML, one that collects what the command prints and writes it as YAML on `done()`
 * (text that is not one JSON document, which no command prints in JSON mode, is written as it came).
 */
export function formatted(out: Output, format: OutputFormat | undefined): { out: Output; json: boolean; format: OutputFormat | undefined; done(): void } {
  if (format !== "yaml") return { out, json: format === "json", format, done: () => undefined };
  let text = "";
  const collecting: Output = {
    out: (t) => void (text += t + "\n"),
    raw: (t) => void (text += t),
    err: (t) => out.err(t),
    // What it prints is a document, not a screen: no redraws, no colours.
    isTTY: false,
    color: false,
    columns: out.columns,
  };
  return {
    out: collecting,
    json: true,
    format,
    done() {
      if (!text) return;
      let doc: unknown;
      try {
        doc = JSON.parse(text);
      } catch {
        out.raw(text);
        return;
      }
      out.raw(stringify(doc));
    },
  };
}
