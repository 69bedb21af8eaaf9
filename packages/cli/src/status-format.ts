/**
 * The human form of a {@link StatusReport}: one block per module, a line per grant, a line
 * per condition with its message wrapped beneath. Fits 80 columns; colours only when asked.
 * Pure.
 */
import { describeLastCheck, formatAge } from "@mesh/shared";
import { meshctlCommand } from "./paths.js";
import type { NotProcessedError, StatusGrant, StatusModule, StatusReport } from "./status-report.js";
import { makeStyle, pad, wrapText, type Style } from "./style.js";

export interface FormatOptions {
  /** The time ages are measured from. */
  now?: Date;
  color?: boolean;
  /** Line width to wrap messages at. */
  width?: number;
}

/** An age like `4 s ago`; `?` for a time that cannot be read. */
export function ageOf(iso: string, now: Date): string {
  const t = Date.parse(iso);
  return Number.isNaN(t) ? "?" : `${formatAge(now.getTime() - t)} ago`;
}

/** How good a state or condition is: what its colour says, in the terminal and in the console. */
export type Tone = "ok" | "warn" | "bad";

/** The tone of a module state. */
export function stateTone(state: string): Tone {
  if (state === "Ready" || state === "NothingRequired") return "ok";
  return state === "Pending" || state === "Deleting" || state === "Deleted" ? "warn" : "bad";
}

/** A module state, coloured by how good it is. */
export function styleState(state: string, s: Style): string {
  return s[stateTone(state)](state);
}

/** False conditions that say "not yet" rather than "failed". */
const WAITING_REASONS = new Set(["AwaitingResolution", "AwaitingDelivery", "NoInstalledPart", "AwaitingHolders"]);

/** True conditions that say a rotation waits for someone to act on a node. */
const BLOCKED_REASONS = new Set(["HookNotAllowed", "HookFailed"]);

/** The tone of a condition: True is ok (but a blocked rotation waits), False is bad unless it only says "not yet". */
export function conditionTone(status: string, reason: string): Tone {
  if (status === "True") return BLOCKED_REASONS.has(reason) ? "warn" : "ok";
  return status === "False" && !WAITING_REASONS.has(reason) ? "bad" : "warn";
}

function styleStatus(status: string, reason: string, s: Style): string {
  return s[conditionTone(status, reason)](status);
}

function formatGrant(g: StatusGrant, o: Required<FormatOptions>, s: Style, reasonWidth: number): string[] {
  const head = [
    `  ${s.bold(g.requirement)}`,
    g.kind,
    `provider ${g.provider ?? s.dim("none")}`,
    `generation ${g.generation}`,
    `parts ${g.parts.join(",") || "-"}`,
  ].join("  ");
  const lines = [head];
  if (g.rotation) lines.push(...formatRotationLine(g.rotation, o, s));
  if (g.lifecycle) lines.push(...formatLifecycle(g.lifecycle, o, s));
  for (const c of g.conditions) {
    // Verified: the age of the last check and where from, not of the last change.
    const age =
      c.type === "Verified" && g.verification
        ? describeLastCheck(c.status === "True", { at: g.verification.lastCheckedAt, from: g.verification.lastCheckedFrom }, o.now.getTime())
        : ageOf(c.observedAt, o.now);
    lines.push(`    ${pad(c.type, 12)} ${pad(styleStatus(c.status, c.reason, s), 7)} ${pad(c.reason, reasonWidth)}  ${s.dim(age)}`);
    if (c.message) lines.push(...wrapText(c.message, o.width, "      "));
  }
  const repairs = g.repairs ?? [];
  if (repairs.length) {
    lines.push(`    ${s.bold("repairs")} ${s.dim(`(${repairs.length > 3 ? `last 3 of ${repairs.length}; ` : ""}--json has all)`)}`);
    for (const r of repairs.slice(-3).reverse()) {
      const head = `${ageOf(r.at, o.now)} ${r.outcome} by ${r.by}${r.requested ? " on request" : ""}`;
      lines.push(...wrapText(`${head}: ${r.message}`, o.width, "      "));
    }
  }
  if (g.conditions.length === 0) lines.push(`    ${s.dim("no condition yet")}`);
  return lines;
}

/** A grant being taken back (`Deleting`, what remains) or kept (`Retained`, how to drop it). */
export function formatLifecycle(l: NonNullable<StatusGrant["lifecycle"]>, o: Required<FormatOptions>, s: Style): string[] {
  const text =
    l.state === "Retained"
      ? `its data is kept since ${l.since} (${ageOf(l.since, o.now)}); its logins are revoked. ${l.drop} drops it; declaring the requirement again adopts it`
      : `${l.reason ?? "taken back"}${l.remains.length ? `: ${l.remains.join("; ")}` : ": finishing"}`;
  return [`    ${s.warn(pad(l.state, 12))}`, ...wrapText(text, o.width, "      ")];
}

/**
 * A grant's running rotation: `rotating 2→3: confirmed 1/2 holders`, and for a Stalled one the
 * holders it waits for.
 */
export function formatRotationLine(r: NonNullable<StatusGrant["rotation"]>, o: { width: number }, s: Style): string[] {
  const head = `    ${s.bold(`rotating ${r.from}→${r.to}`)}: confirmed ${r.confirmed}/${r.total} holder${r.total === 1 ? "" : "s"}`;
  if (r.state !== "Stalled") return [`${head}  ${s.dim(`${r.state}, ${r.id}`)}`];
  const shown = r.missing.slice(0, 10).join(", ") + (r.missing.length > 10 ? ` and ${r.missing.length - 10} more` : "");
  return [
    `${head}  ${s.bad("Stalled")} ${s.dim(r.id)}`,
    ...wrapText(
      `missing: ${shown}; generation ${r.from} keeps working, and the rotation commits by itself when they confirm (meshctl trace ${r.id})`,
      o.width,
      "      ",
    ),
  ];
}

/** The lines of one module. */
export function formatModule(m: StatusModule, opts: FormatOptions = {}): string[] {
  const o = { now: opts.now ?? new Date(), color: opts.color ?? false, width: opts.width ?? 80 };
  const s = makeStyle(o.color);
  const lines = [`${s.bold(m.module)}  ${styleState(m.state, s)}  ${s.dim(`since ${ageOf(m.since, o.now)}`)}`];
  if (m.message) lines.push(...wrapText(m.message, o.width, "  ").map((l) => s.dim(l)));
  // One reason column for the whole module, so its conditions line up.
  const reasonWidth = Math.max(0, ...m.grants.flatMap((g) => g.conditions.map((c) => c.reason.length)));
  for (const g of m.grants) lines.push(...formatGrant(g, o, s, reasonWidth));
  return lines;
}

/** The lines that explain a never-processed module. */
export function formatNotProcessed(e: NotProcessedError, width = 80): string[] {
  return [e.message, ...wrapText(e.hint, width)];
}

/** The whole report as text, without a trailing newline. */
export function formatStatus(report: StatusReport, opts: FormatOptions = {}): string {
  const width = opts.width ?? 80;
  if (report.error) return formatNotProcessed(report.error, width).join("\n");
  const blocks = report.modules.map((m) => formatModule(m, opts).join("\n"));
  if (blocks.length === 0) blocks.push(`no module has been processed yet; apply one with: ${meshctlCommand()} apply -f FILE`);
  if (report.unprocessed?.length) {
    blocks.push(
      wrapText(
        `stored but not processed yet: ${report.unprocessed.join(", ")} (if this lasts, the resolver is not running: ${meshctlCommand()} up starts it)`,
        width,
      ).join("\n"),
    );
  }
  return blocks.join("\n\n");
}
