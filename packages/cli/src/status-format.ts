/**
 * The human form of a {@link StatusReport}: one block per module, a line per grant, a line
 * per condition with its message wrapped beneath. Fits 80 columns; colours only when asked.
 * Pure.
 */
import { formatAge } from "@mesh/shared";
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

/** A module state, coloured by how good it is. */
export function styleState(state: string, s: Style): string {
  if (state === "Ready" || state === "NothingRequired") return s.ok(state);
  if (state === "Pending") return s.warn(state);
  return s.bad(state);
}

/** False conditions that say "not yet" rather than "failed". */
const WAITING_REASONS = new Set(["AwaitingResolution", "AwaitingDelivery", "NoInstalledPart", "AwaitingHolders"]);

function styleStatus(status: string, reason: string, s: Style): string {
  if (status === "True") return s.ok(status);
  return status === "False" && !WAITING_REASONS.has(reason) ? s.bad(status) : s.warn(status);
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
  for (const c of g.conditions) {
    lines.push(`    ${pad(c.type, 12)} ${pad(styleStatus(c.status, c.reason, s), 7)} ${pad(c.reason, reasonWidth)}  ${s.dim(ageOf(c.observedAt, o.now))}`);
    if (c.message) lines.push(...wrapText(c.message, o.width, "      "));
  }
  if (g.conditions.length === 0) lines.push(`    ${s.dim("no condition yet")}`);
  return lines;
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
  if (blocks.length === 0) blocks.push("no module has been processed yet; apply one with: npx meshctl apply -f FILE");
  if (report.unprocessed?.length) {
    blocks.push(
      wrapText(
        `stored but not processed yet: ${report.unprocessed.join(", ")} (if this lasts, the resolver is not running: npx meshctl up starts it)`,
        width,
      ).join("\n"),
    );
  }
  return blocks.join("\n\n");
}
