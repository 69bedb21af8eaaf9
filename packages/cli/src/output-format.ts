/**
 * `-o json|yaml` of every command that prints state, as kubectl and the `nats` CLI spell it;
 * `--json` stays as the alias of `-o json`. A command knows one machine format, JSON: in YAML
 * it prints its JSON to a collecting output, which writes the same document as YAML when the
 * command is done, so the two never say different things.
 */
import { Option } from "commander";
import { stringify } from "yaml";
import type { Output } from "./output.js";

export const OutputFormats = ["json", "yaml"] as const;
export type OutputFormat = (typeof OutputFormats)[number];

/** The `-o, --output` option, with its choices (commander refuses any other, exit 2). */
export function outputOption(): Option {
  return new Option("-o, --output <format>", "print as json or yaml (--json is -o json)").choices(OutputFormats);
}

/** The format a command's options ask for: `-o`, or `--json`; undefined for the human form. */
export function formatOf(o: { json?: boolean; output?: string }): OutputFormat | undefined {
  if (o.output === "json" || o.output === "yaml") return o.output;
  return o.json ? "json" : undefined;
}

/**
 * Where a command in `format` writes, and whether it prints JSON: the process's output as it is,
 * or, for YAML, one that collects what the command prints and writes it as YAML on `done()`
 * (text that is not one JSON document, which no command prints in JSON mode, is written as it came).
 */
export function formatted(out: Output, format: OutputFormat | undefined): { out: Output; json: boolean; done(): void } {
  if (format !== "yaml") return { out, json: format === "json", done: () => undefined };
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
