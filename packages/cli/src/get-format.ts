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
  /** `-o wide`: more columns. */
  wide?: boolean;
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

/** One column of a table: its header, its cell of a row, and whether only `-o wide` shows it. */
interface Column<R> {
  header: string;
  cell: (r: R, s: Style, now: Date) => string;
  wide?: boolean;
}

/** The columns `o` shows of `columns`. */
function shown<R>(columns: ReadonlyArray<Column<R>>, o: TableOptions): Array<Column<R>> {
  return columns.filter((c) => !c.wide || o.wide);
}

/** The table of `rows` in `columns`, as `o` asks. */
function table<R>(columns: ReadonlyArray<Column<R>>, rows: readonly R[], o: TableOptions): string {
  const s = makeStyle(o.color ?? false);
  const now = o.now ?? new Date();
  const cols = shown(columns, o);
  return formatTable(
    cols.map((c) => c.header),
    rows.map((r) => cols.map((c) => c.cell(r, s, now))),
    o.width,
  );
}

const MODULE_COLUMNS: ReadonlyArray<Column<ModuleRow>> = [
  { header: "NAME", cell: (r) => printable(r.name) },
  { header: "STATE", cell: (r, s) => styleState(r.state, s) },
  { header: "READY", cell: (r) => `${r.ready.satisfied}/${r.ready.total}` },
  { header: "SINCE", cell: (r, _s, now) => ageOf(r.since, now) },
  {
    header: "PARTS",
    cell: (r, s) => (r.parts.length ? r.parts.map((p) => printable(`${p.name}@${p.node}${p.installed ? "" : "(not installed)"}`)).join(",") : s.dim("-")),
    wide: true,
  },
  { header: "REASON", cell: (r, s) => dash(s, r.message) },
];

/** `get modules`: NAME STATE READY SINCE REASON; `-o wide` adds PARTS. */
export function formatModuleRows(rows: readonly ModuleRow[], o: TableOptions = {}): string {
  return table(MODULE_COLUMNS, rows, o);
}

const GRANT_COLUMNS: ReadonlyArray<Column<GrantRow>> = [
  { header: "NAME", cell: (r) => printable(r.id) },
  { header: "KIND", cell: (r) => r.kind },
  { header: "PROVIDER", cell: (r, s) => dash(s, r.provider) },
  { header: "GEN", cell: (r) => String(r.generation) },
  { header: "HOLDERS", cell: (r) => `${r.holders.current}/${r.holders.total}` },
  { header: "STATE", cell: (r, s) => s[requirementTone(r.state)](r.state) },
  { header: "VERIFIED", cell: (r, s) => (r.verified ? `${r.verified.status} ${r.verified.reason}` : s.dim("-")), wide: true },
  { header: "TARGETS", cell: (r, s) => (r.targets.length ? printable(r.targets.join(",")) : s.dim("-")), wide: true },
  { header: "REASON", cell: (r, s) => dash(s, r.reason) },
  { header: "UPDATED", cell: (r, s, now) => (r.updatedAt ? ageOf(r.updatedAt, now) : s.dim("-")) },
];

/** `get grants`: NAME KIND PROVIDER GEN HOLDERS STATE REASON UPDATED; `-o wide` adds VERIFIED and TARGETS. */
export function formatGrantRows(rows: readonly GrantRow[], o: TableOptions = {}): string {
  return table(GRANT_COLUMNS, rows, o);
}

/** Where a provider answers from: `-` with no report, `2/2 nodes`, `1/2 nodes, not from node-b`. */
export function reachableCell(r: ProviderRow): string {
  if (r.builtin) return "built-in";
  const total = r.reachableFrom + r.unreachableFrom.length;
  if (total === 0) return "-";
  const nodes = `${r.reachableFrom}/${total} node${total === 1 ? "" : "s"}`;
  return r.unreachableFrom.length ? `${nodes}, not from ${r.unreachableFrom.map((u) => u.node).join(", ")}` : nodes;
}

const PROVIDER_COLUMNS: ReadonlyArray<Column<ProviderRow>> = [
  { header: "NAME", cell: (r) => printable(r.name) },
  { header: "SERVES", cell: (r) => r.serves.join(",") },
  { header: "NODE", cell: (r, s) => dash(s, r.node) },
  { header: "INSTALLED", cell: (r, s) => (r.installed ? "yes" : s.warn("no")) },
  { header: "GRANTS", cell: (r) => String(r.grants) },
  { header: "PREFERENCE", cell: (r) => String(r.preference), wide: true },
  { header: "ENDPOINT", cell: (r, s) => dash(s, r.endpoint), wide: true },
  {
    header: "REACHABLE",
    cell: (r, s) => {
      const reach = reachableCell(r);
      return r.unreachableFrom.length ? s.bad(printable(reach)) : printable(reach);
    },
  },
];

/** `get providers`: NAME SERVES NODE INSTALLED GRANTS REACHABLE; `-o wide` adds PREFERENCE and ENDPOINT. */
export function formatProviderRows(rows: readonly ProviderRow[], o: TableOptions = {}): string {
  return table(PROVIDER_COLUMNS, rows, o);
}
