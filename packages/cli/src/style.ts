/**
 * Colours for terminals, and plain text for everything else. A {@link Style} with colour off
 * returns its input unchanged, so formatting code never branches on the terminal.
 */

export interface Style {
  ok(text: string): string;
  bad(text: string): string;
  warn(text: string): string;
  dim(text: string): string;
  bold(text: string): string;
}

const wrap = (open: number, close: number) => (t: string) => `\x1b[${open}m${t}\x1b[${close}m`;

/** ANSI colours when `color` is true, identity functions otherwise. */
export function makeStyle(color: boolean): Style {
  if (!color) {
    const id = (t: string) => t;
    return { ok: id, bad: id, warn: id, dim: id, bold: id };
  }
  return { ok: wrap(32, 39), bad: wrap(31, 39), warn: wrap(33, 39), dim: wrap(2, 22), bold: wrap(1, 22) };
}

/** Length of `text` as shown, ANSI colour codes not counted. */
export function visibleLength(text: string): number {
  // eslint-disable-next-line no-control-regex
  return text.replace(/\x1b\[[0-9;]*m/g, "").length;
}

/** Pads `text` with spaces to `width` visible columns. */
export function pad(text: string, width: number): string {
  const n = visibleLength(text);
  return n >= width ? text : text + " ".repeat(width - n);
}

/**
 * `text` with every control character but newline and tab shown as a visible escape (`\x1b`):
 * messages come from the store and from services' replies, and a condition message that
 * carried terminal escapes would otherwise move the cursor, clear the screen or retitle the
 * terminal of whoever runs `meshctl status`. meshctl's own colours are added after this.
 */
export function printable(text: string): string {
  // C0 controls but \t and \n, DEL, and C1 controls (U+0080-U+009F, which some terminals obey too).
  // eslint-disable-next-line no-control-regex -- control characters are what it looks for
  return text.replace(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/g, (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, "0")}`);
}

/**
 * Breaks `text`, made {@link printable}, into lines of at most `width` characters at spaces (a
 * word longer than `width` is cut), each prefixed with `indent`.
 */
export function wrapText(text: string, width: number, indent = ""): string[] {
  const room = Math.max(10, width - indent.length);
  const lines: string[] = [];
  let line = "";
  for (let word of printable(text).split(/\s+/).filter(Boolean)) {
    while (word.length > room) {
      if (line) {
        lines.push(line);
        line = "";
      }
      lines.push(word.slice(0, room));
      word = word.slice(room);
    }
    if (!line) line = word;
    else if (line.length + 1 + word.length <= room) line += " " + word;
    else {
      lines.push(line);
      line = word;
    }
  }
  if (line) lines.push(line);
  return lines.map((l) => indent + l);
}

/** `text` cut to `width` visible columns, ending in `…` when cut; colour codes are kept, and reset after a cut. */
export function truncate(text: string, width: number): string {
  if (visibleLength(text) <= width) return text;
  let shown = 0;
  let out = "";
  // eslint-disable-next-line no-control-regex
  for (const part of text.split(/(\x1b\[[0-9;]*m)/)) {
    if (part.startsWith("\x1b[")) {
      out += part;
      continue;
    }
    const room = width - 1 - shown;
    if (part.length > room) {
      out += part.slice(0, Math.max(0, room)) + "…";
      return out.includes("\x1b[") ? out + "\x1b[0m" : out;
    }
    out += part;
    shown += part.length;
  }
  return out;
}
