/** The human form of an {@link Explanation}. Pure. */
import type { Explanation, RequirementState } from "./explain.js";
import { styleState, type Tone } from "./status-format.js";
import { makeStyle, wrapText, type Style } from "./style.js";

/** What a requirement state is called in words (`cannot be satisfied yet`). */
export const REQUIREMENT_WORDS: Record<RequirementState, string> = {
  Satisfied: "satisfied",
  InProgress: "in progress",
  Unsatisfiable: "cannot be satisfied yet",
  Failing: "failing",
  Dormant: "not provisioned (no installed part needs it)",
};

/** The tone of a requirement state. */
export function requirementTone(state: RequirementState): Tone {
  if (state === "Satisfied") return "ok";
  return state === "InProgress" || state === "Dormant" ? "warn" : "bad";
}

function styleWords(state: RequirementState, s: Style): string {
  return s[requirementTone(state)](REQUIREMENT_WORDS[state]);
}

/** Indents `text` wrapped at `width`, the first line after `label`. */
function labelled(label: string, text: string, width: number): string[] {
  const indent = " ".repeat(label.length);
  const lines = wrapText(text, width, indent);
  if (lines.length) lines[0] = label + lines[0]!.slice(indent.length);
  return lines;
}

/** The explanation as text, without a trailing newline. */
export function formatExplanation(e: Explanation, opts: { color?: boolean; width?: number } = {}): string {
  const s = makeStyle(opts.color ?? false);
  const width = opts.width ?? 80;
  const lines = [`${s.bold(e.module)}  ${styleState(e.state, s)}`];
  if (e.message) lines.push(...wrapText(e.message, width, "  "));
  for (const n of e.notes) lines.push("", ...labelled("note: ", n, width));
  for (const r of e.requirements) {
    lines.push("", `${s.bold(r.requirement)} (${r.kind}, for ${r.parts.join(", ") || "no part"}): ${styleWords(r.state, s)}`);
    lines.push(...labelled("  why:  ", r.why, width));
    if (r.next) lines.push(...labelled("  next: ", r.next, width));
    for (const d of r.details) lines.push(...labelled("  - ", d, width));
  }
  return lines.join("\n");
}
