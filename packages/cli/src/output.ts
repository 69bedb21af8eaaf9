/**
 * Where a command writes: its standard output and error, and what the terminal can show.
 * Commands take an {@link Output} instead of touching `process.stdout`, so tests read what
 * they printed.
 */

export interface Output {
  /** Writes one line (or several, joined by newlines) to standard output. */
  out(text: string): void;
  /** Writes one line (or several) to standard error. */
  err(text: string): void;
  /** Whether standard output is a terminal (redraws, colours). */
  readonly isTTY: boolean;
  /** Whether colours may be used: a terminal, and `NO_COLOR` not set. */
  readonly color: boolean;
  /** Width of the terminal, or 80 when it is not one. */
  readonly columns: number;
  /** Writes raw text to standard output, no newline added (for screen redraws). */
  raw(text: string): void;
}

/** The process's own standard output and error. */
export function processOutput(env: NodeJS.ProcessEnv = process.env): Output {
  const tty = Boolean(process.stdout.isTTY);
  return {
    out: (t) => void process.stdout.write(t + "\n"),
    err: (t) => void process.stderr.write(t + "\n"),
    raw: (t) => void process.stdout.write(t),
    isTTY: tty,
    color: tty && !env.NO_COLOR && env.TERM !== "dumb",
    get columns() {
      return tty ? Math.max(40, process.stdout.columns || 80) : 80;
    },
  };
}

/** An {@link Output} that keeps everything in memory; for tests and for capturing. */
export interface BufferedOutput extends Output {
  readonly stdout: string;
  readonly stderr: string;
}

/** An in-memory {@link Output}; `opts` pretends to be a terminal. */
export function bufferOutput(opts: { isTTY?: boolean; color?: boolean; columns?: number } = {}): BufferedOutput {
  let stdout = "";
  let stderr = "";
  return {
    out: (t) => void (stdout += t + "\n"),
    err: (t) => void (stderr += t + "\n"),
    raw: (t) => void (stdout += t),
    isTTY: opts.isTTY ?? false,
    color: opts.color ?? false,
    columns: opts.columns ?? 80,
    get stdout() {
      return stdout;
    },
    get stderr() {
      return stderr;
    },
  };
}
