/**
 * The tables of `meshctl get`: a header row and one aligned row per record, the last column
 * left ragged (and cut to the terminal's width on a terminal). Pure.
 */
import { requirementTone } from "./explain-format.js";
import type { GrantRow, ModuleRow, ProviderRow } from "./get-report.js";
import { ageOf, styleState } from "./status-format.js";
import { makeStyle, pad, printable, truncate, visibleLength, type Style } from "./style.js";

export interface TableOptions {
  now?: Date;
  color?: boolean;
  /** Cut each line to this many columns (a terminal's width); no cut when left out. */
  width?: number;
}

/**
 * Columns aligned on the widest cell (colour codes not counted), two spaces apart. Cells are
 * made printable: they carry services' words (messages, names).
 */
export function formatTable(header: readonly string[], rows: ReadonlyArray<readonly string[]>, width?: number): string {
  const widths = header.map((h, i) => Math.max(visibleLength(h), ...rows.map((r) => visibleLength(r[i] ?? ""))));
  const line = (cells: readonly string[]) => {
    const text = cells
      .map((c, i) => (i === cells.length - 1 ? c : pad(c, widths[i]!)))
      .join("  ")
      .trimEnd();
    return width === undefined ? text : truncate(text, width);
  };
  return [line(header), ...rows.map(line)].join("\n");
}

const dash = (s: Style, v: string | null | undefined) => (v ? printable(v) : s.dim("-"));

/** `get modules`: NAME STATE READY SINCE REASON. */
export function formatModuleRows(rows: readonly ModuleRow[], o: TableOptions = {}): string {
  const s = makeStyle(o.color ?? false);
  const now = o.now ?? new Date();
  return formatTable(
    ["NAME", "STATE", "READY", "SINCE", "REASON"],
    rows.map((r) => [printable(r.name), styleState(r.state, s), `${r.ready.satisfied}/${r.ready.total}`, ageOf(r.since, now), dash(s, r.message)]),
    o.width,
  );
}

/** `get grants`: NAME KIND PROVIDER GEN HOLDERS STATE REASON UPDATED. */
export function formatGrantRows(rows: readonly GrantRow[], o: TableOptions = {}): string {
  const s = makeStyle(o.color ?? false);
  const now = o.now ?? new Date();
  return formatTable(
    ["NAME", "KIND", "PROVIDER", "GEN", "HOLDERS", "STATE", "REASON", "UPDATED"],
    rows.map((r) => [
      printable(r.id),
      r.kind,
      dash(s, r.provider),
      String(r.generation),
      `${r.holders.current}/${r.holders.total}`,
      s[requirementTone(r.state)](r.state),
      dash(s, r.reason),
      r.updatedAt ? ageOf(r.updatedAt, now) : s.dim("-"),
    ]),
    o.width,
  );
}

/** Where a provider answers from: `-` with no report, `2/2 nodes`, `1/2 nodes, not from node-b`. */
export function reachableCell(r: ProviderRow): string {
  if (r.builtin) return "built-in";
  const total = r.reachableFrom + r.unreachableFrom.length;
  if (total === 0) return "-";
  const nodes = `${r.reachableFrom}/${total} node${total === 1 ? "" : "s"}`;
  return r.unreachableFrom.length ? `${nodes}, not from ${r.unreachableFrom.map((u) => u.node).join(", ")}` : nodes;
}

/** `get providers`: NAME SERVES NODE INSTALLED GRANTS REACHABLE. */
export function formatProviderRows(rows: readonly ProviderRow[], o: TableOptions = {}): string {
  const s = makeStyle(o.color ?? false);
  return formatTable(
    ["NAME", "SERVES", "NODE", "INSTALLED", "GRANTS", "REACHABLE"],
    rows.map((r) => {
      const reach = reachableCell(r);
      return [
        printable(r.name),
        r.serves.join(","),
        dash(s, r.node),
        r.installed ? "yes" : s.warn("no"),
        String(r.grants),
        r.unreachableFrom.length ? s.bad(printable(reach)) : printable(reach),
      ];
    }),
    o.width,
  );
}
