/**
 * The all-in-one's live status: the modules and grants kept current from KV watches, shown
 * as a redrawn screen on a terminal, or as one line per change otherwise.
 */
import { Grant, ModuleStatus, RecordTooNewError } from "@mesh/shared";
import { entryJson, retryJetStreamGap, retryJetStreamIdempotent, type KV, type Store } from "@mesh/shared/runtime";
import type { Output } from "./output.js";
import { formatStatus } from "./status-format.js";
import { printable, truncate } from "./style.js";
import { buildStatusReport } from "./status-report.js";

/** `HH:MM:SS` of a time, local. */
export function clock(d: Date): string {
  return d.toTimeString().slice(0, 8);
}

/** Lines describing how a module's record changed (`shop Ready: all requirements are satisfied`). Pure. */
export function moduleChangeLines(prev: ModuleStatus | undefined, next: ModuleStatus | undefined): string[] {
  if (!next) return prev ? [`${prev.module} removed`] : [];
  if (prev && prev.state === next.state && prev.message === next.message) return [];
  return [`${next.module} ${next.state}${next.message ? `: ${printable(next.message)}` : ""}`];
}

/** Lines describing how a grant changed, one per condition that moved (`shop/db Provisioned=True Provisioned: …`). Pure. */
export function grantChangeLines(prev: Grant | undefined, next: Grant | undefined): string[] {
  if (!next) return prev ? [`${prev.id} removed`] : [];
  const lines: string[] = [];
  for (const c of next.conditions) {
    const before = prev?.conditions.find((p) => p.type === c.type);
    if (before && before.status === c.status && before.reason === c.reason && before.message === c.message) continue;
    lines.push(`${next.id} ${c.type}=${c.status} ${c.reason}${c.message ? `: ${printable(c.message)}` : ""}`);
  }
  for (const p of prev?.conditions ?? []) {
    if (!next.conditions.some((c) => c.type === p.type)) lines.push(`${next.id} ${p.type} cleared`);
  }
  if (prev && prev.generation !== next.generation && !lines.length) lines.push(`${next.id} generation ${next.generation}`);
  return lines;
}

/** The current picture, as the watches have seen it. */
export interface MeshSnapshot {
  modules: Map<string, ModuleStatus>;
  grants: Map<string, Grant>;
}

/** The status text of a snapshot (same form as `meshctl status`). */
export function formatSnapshot(s: MeshSnapshot, opts: { now?: Date; color?: boolean; width?: number } = {}): string {
  return formatStatus(buildStatusReport([...s.modules.values()], [...s.grants.values()]), opts);
}

/** A running live status; `stop()` ends the watches. */
export interface LiveStatus {
  stop(): void;
  /** Adds a line to the events shown (child exits…); printed at once when not a terminal. */
  event(line: string): void;
}

async function follow<T>(
  kv: KV,
  schema: { safeParse(v: unknown): { success: true; data: T } | { success: false } },
  onChange: (key: string, value: T | undefined) => void,
  /** A record written in a newer format than this meshctl reads: left out of the picture, and said. */
  refused: (e: RecordTooNewError) => void,
): Promise<{ stop(): void }> {
  const iter = await retryJetStreamGap(() => kv.watch({ key: ">" }));
  void (async () => {
    for await (const e of iter) {
      if (e.operation !== "PUT" || e.length === 0) {
        onChange(e.key, undefined);
        continue;
      }
      let raw: unknown;
      try {
        raw = entryJson(e);
      } catch (err) {
        if (err instanceof RecordTooNewError) refused(err);
        continue;
      }
      const r = schema.safeParse(raw);
      if (r.success) onChange(e.key, r.data);
    }
    // A watch ends when the connection closes; the live status then stops changing.
  })().catch(() => undefined);
  return { stop: () => iter.stop() };
}

/**
 * Watches `mesh-modules` and `mesh-grants` and shows every change. On a terminal the screen
 * is redrawn (at most every 100 ms, and every 5 s so ages move) under `header`; otherwise
 * each change is a line `<time> <what changed>`.
 */
export async function startLiveStatus(store: Store, out: Output, header: () => string[]): Promise<LiveStatus> {
  const snap: MeshSnapshot = { modules: new Map(), grants: new Map() };
  const events: string[] = [];
  let timer: NodeJS.Timeout | undefined;
  const redraw = () => {
    timer = undefined;
    const lines = [
      ...header(),
      "",
      formatSnapshot(snap, { color: out.color, width: out.columns }),
      ...(events.length ? ["", ...events.slice(-5)] : []),
      "",
      "Ctrl-C stops the mesh.",
    ];
    out.raw("\x1b[H\x1b[2J" + lines.join("\n") + "\n");
  };
  const changed = () => {
    if (out.isTTY && !timer) timer = setTimeout(redraw, 100);
  };
  const print = (lines: string[]) => {
    if (out.isTTY) return;
    const t = clock(new Date());
    for (const l of lines) out.out(`${t} ${l}`);
  };
  const event = (line: string) => {
    const l = `${clock(new Date())} ${line}`;
    if (out.isTTY) {
      events.push(l);
      changed();
    } else out.out(l);
  };
  const saidRefused = new Set<string>();
  const refused = (e: RecordTooNewError) => {
    if (saidRefused.has(e.record)) return;
    saidRefused.add(e.record);
    event(e.message);
  };
  const modules = await follow(
    store.kv.modules,
    ModuleStatus,
    (key, value) => {
      print(moduleChangeLines(snap.modules.get(key), value));
      if (value) snap.modules.set(key, value);
      else snap.modules.delete(key);
      changed();
    },
    refused,
  );
  const grants = await follow(
    store.kv.grants,
    Grant,
    (key, value) => {
      print(grantChangeLines(snap.grants.get(key), value));
      if (value) snap.grants.set(key, value);
      else snap.grants.delete(key);
      changed();
    },
    refused,
  );
  const ticker = out.isTTY ? setInterval(changed, 5_000) : undefined;
  if (out.isTTY) redraw();
  return {
    stop() {
      modules.stop();
      grants.stop();
      if (timer) clearTimeout(timer);
      if (ticker) clearInterval(ticker);
    },
    event,
  };
}

/** A progress line that follows something as it changes; `done()` ends it. */
export interface LiveLine {
  /** Shows `line`, unless it is the one shown last. */
  show(line: string): void;
  /** Ends the line on a terminal (a newline after the last redraw). */
  done(): void;
}

/**
 * Progress as meshctl shows it: on a terminal one line redrawn in place (cut to its width), otherwise one line per
 * change (prefixed with the time when `timestamps`), so a log or a CI job reads every step.
 */
export function liveLine(out: Output, opts: { timestamps?: boolean } = {}): LiveLine {
  let shown = "";
  return {
    show(line) {
      if (line === shown) return;
      shown = line;
      // Cut to the terminal's width: a line that wrapped could not be redrawn in place.
      if (out.isTTY) out.raw(`\r\x1b[2K${truncate(line, out.columns - 1)}`);
      else out.out(opts.timestamps ? `${clock(new Date())} ${line}` : line);
    },
    done() {
      if (out.isTTY && shown) out.raw("\n");
    },
  };
}

/** A KV watch, as `kv.watch` opens it. */
export type KvWatch = Awaited<ReturnType<KV["watch"]>>;

/**
 * Opens a watch that stops by itself at `untilMs`; JetStream not answering while it opens is
 * ridden out for as long as the wait lasts (several identities rotating at once keep it quiet
 * through reload after reload; on a cluster, a server lost makes opening one time out until a
 * new leader is elected). `stop()` ends it and its timer.
 */
export async function watchUntil(open: () => Promise<KvWatch>, untilMs: number): Promise<{ watch: KvWatch; timedOut(): boolean; stop(): void }> {
  const watch = await retryJetStreamIdempotent(open, Math.max(1, untilMs - Date.now()));
  let timedOut = false;
  const timer = setTimeout(
    () => {
      timedOut = true;
      watch.stop();
    },
    Math.max(0, untilMs - Date.now()),
  );
  return {
    watch,
    timedOut: () => timedOut,
    stop() {
      clearTimeout(timer);
      watch.stop();
    },
  };
}
