/**
 * What meshctl shows of a rotation record: the `--json` summary of `meshctl rotate`, the
 * progress line, the outcome, and the per-holder timeline of `meshctl trace`. Pure: every
 * function reads only the {@link Rotation} it is given (times in it are offsets from
 * `requestedAt`, in milliseconds).
 */
import { RotationStates, formatBytes, holderAckedOn, type Rotation } from "@mesh/shared";
import { makeStyle, wrapText } from "./style.js";

/**
 * One holder in a {@link RotationSummary}: `confirmedAt` is null while it has not confirmed.
 * A confirmation is the holder's JetStream ack of the broadcast: `stream` and `consumer` are
 * where it acknowledged, `ackedSeq` the stream sequence it acknowledged.
 */
export interface SummaryHolder {
  holder: string;
  confirmedAt: string | null;
  stream?: string;
  consumer?: string;
  ackedSeq?: number;
}

/** Where holder `holder` of `r` acknowledged, for the JSON forms. */
function ackOf(r: Rotation, holder: string, p: Rotation["holders"][string] | undefined): { stream?: string; consumer?: string; ackedSeq?: number } {
  if (!p || p.c === undefined) return {};
  const on = holderAckedOn(r.grant, holder, p);
  return { ...(on ? { stream: on.stream, consumer: on.consumer } : {}), ...(p.q !== undefined ? { ackedSeq: p.q } : {}) };
}

/**
 * What `meshctl rotate --json` prints. The first seven fields are the documented contract;
 * fields may be added, never renamed.
 */
export interface RotationSummary {
  rotation: string;
  grant: string;
  from: number;
  to: number;
  state: Rotation["state"];
  /** Every holder that must confirm, sorted by id. */
  holders: SummaryHolder[];
  /** Holders that have not confirmed yet, sorted. */
  missing: string[];
  /** Holders the operator evicted (meshctl rotate --evict), sorted. */
  evicted: string[];
  requestedAt: string;
  deadline: string;
  committedAt?: string;
  trigger: Rotation["trigger"];
}

/** Progress counts of a rotation. */
export interface RotationProgress {
  confirmed: number;
  total: number;
  missing: string[];
  /** Holders the operator evicted: the rotation went on without them. */
  evicted: string[];
}

/** The absolute ISO time of an offset `ms` from the rotation's start; undefined for no offset. */
export function atOffset(r: Rotation, ms: number | undefined): string | undefined {
  if (ms === undefined) return undefined;
  const start = Date.parse(r.requestedAt);
  return Number.isNaN(start) ? undefined : new Date(start + ms).toISOString();
}

/** How many holders confirmed, of how many, and which are missing (sorted). */
export function rotationProgress(r: Rotation): RotationProgress {
  const entries = Object.entries(r.holders);
  const missing = entries
    .filter(([, p]) => p.c === undefined && p.e === undefined)
    .map(([h]) => h)
    .sort();
  const evicted = entries
    .filter(([, p]) => p.c === undefined && p.e !== undefined)
    .map(([h]) => h)
    .sort();
  return { confirmed: entries.length - missing.length - evicted.length, total: entries.length, missing, evicted };
}

/** What names a rotation and where it stands: the first fields of every JSON form of it. */
function rotationIdentity(r: Rotation) {
  return { rotation: r.id, grant: r.grant, from: r.from, to: r.to, state: r.state };
}

/** The `--json` form of a rotation. */
export function summarizeRotation(r: Rotation): RotationSummary {
  const holders = Object.keys(r.holders)
    .sort()
    .map((holder) => ({ holder, confirmedAt: atOffset(r, r.holders[holder]?.c) ?? null, ...ackOf(r, holder, r.holders[holder]) }));
  const progress = rotationProgress(r);
  return {
    ...rotationIdentity(r),
    holders,
    missing: progress.missing,
    evicted: progress.evicted,
    requestedAt: r.requestedAt,
    deadline: r.deadline,
    ...(r.committedAt ? { committedAt: r.committedAt } : {}),
    trigger: r.trigger,
  };
}

/** `confirmed 37/40 holders`; while a handover's copy runs, how far it has come before that. */
export function progressLine(r: Rotation): string {
  const p = rotationProgress(r);
  const confirmed = `confirmed ${p.confirmed}/${p.total} holder${p.total === 1 ? "" : "s"}`;
  const c = r.state === RotationStates.Staged ? r.carrying : undefined;
  if (!c) return confirmed;
  return `copying what it stores from ${r.fromProvider}: ${c.copied + c.present}/${c.total} artifacts, ${formatBytes(c.bytes)} copied; ${confirmed}`;
}

/** A short list of holders: the first `max`, then how many more. */
export function listHolders(holders: readonly string[], max = 10): string {
  const shown = holders.slice(0, max).join(", ");
  return holders.length > max ? `${shown} and ${holders.length - max} more` : shown;
}

/** Milliseconds as `850 ms` or `12.3 s`. */
export function formatDurationMs(ms: number): string {
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(1)} s`;
}

/** The line `meshctl rotate` prints once the rotator accepted the request. */
export function formatStarted(r: Rotation): string {
  const n = Object.keys(r.holders).length;
  const who = n === 0 ? "no holder has to confirm" : `${n} holder${n === 1 ? "" : "s"} must confirm by ${r.deadline}`;
  return `rotation ${r.id} started: grant ${r.grant}, generation ${r.from} → ${r.to}; ${who}`;
}

/**
 * What happened, for the end of `meshctl rotate --wait` (and for a rotation found running):
 * committed with how long it took, stalled naming who is missing and what that means, or still
 * in progress. Lines, wrapped at `width`.
 */
export function formatOutcome(r: Rotation, opts: { color?: boolean; width?: number } = {}): string[] {
  const s = makeStyle(opts.color ?? false);
  const width = opts.width ?? 80;
  const p = rotationProgress(r);
  if (r.state === RotationStates.Committed) {
    const took = r.committedAt ? ` in ${formatDurationMs(Date.parse(r.committedAt) - Date.parse(r.requestedAt))}` : "";
    return wrapText(
      `${s.ok("Committed")}: rotation ${r.id}, ${p.confirmed}/${p.total} holders confirmed${took}; grant ${r.grant} is on generation ${r.to}, generation ${r.from} is retired`,
      width,
    );
  }
  if (r.state === RotationStates.Stalled) {
    return [
      ...wrapText(
        `${s.bad("Stalled")}: rotation ${r.id}, ${p.missing.length} of ${p.total} holders have not confirmed generation ${r.to} since the deadline ${r.deadline}: ${listHolders(p.missing)}`,
        width,
      ),
      ...wrapText(
        `Generation ${r.from} keeps working. Bring those holders back (their agent or application); the rotation commits by itself once they confirm. meshctl trace ${r.id} shows each holder's progress.`,
        width,
      ),
    ];
  }
  return wrapText(`${s.warn(r.state)}: rotation ${r.id}, ${progressLine(r)}; missing ${listHolders(p.missing) || "none"}`, width);
}

/**
 * One event of a holder's timeline: when, as an offset from the rotation's start and absolute,
 * and whose clock measured it: the rotator's (its states; an ack it found in a consumer's ack
 * floor rather than saw, after it restarted), the NATS server's (a holder's ack, from the
 * server's ack metric or the consumer's last activity), or, in records from before
 * confirmations were JetStream acks, the holder's own.
 */
export interface TraceEvent {
  offsetMs: number;
  at: string;
  clock: "rotator" | "server" | "holder";
}

/** One holder's line of the fan-out. */
export interface TraceHolder {
  holder: string;
  /** The broadcast (or delivery) reached the holder. */
  received: TraceEvent | null;
  /** The holder applied the new generation (files written or application switched, login proved). */
  applied: TraceEvent | null;
  /** The server recorded its ack of the broadcast (its confirmation). */
  confirmed: TraceEvent | null;
  /** The stream and consumer it acknowledged on, and the stream sequence acknowledged. */
  stream?: string;
  consumer?: string;
  ackedSeq?: number;
  /** The ack was found in the consumer's ack floor (the rotator restarted, or its metric was lost): `confirmed` is when it was found. */
  foundInAckFloor?: true;
  /** The operator evicted it: the rotation went on without it. */
  evicted?: TraceEvent | null;
}

/** What `meshctl trace --json` prints. */
export interface RotationTrace {
  rotation: string;
  grant: string;
  from: number;
  to: number;
  state: Rotation["state"];
  requestedAt: string;
  deadline: string;
  committedAt?: string;
  traceparent?: string;
  /** The rotation's own states, in order. */
  states: Array<{ state: string } & TraceEvent>;
  /** Holders ordered by confirmation (those that have not confirmed last, by id). */
  holders: TraceHolder[];
  missing: string[];
}

function event(r: Rotation, ms: number | undefined, clock: TraceEvent["clock"]): TraceEvent | null {
  const at = atOffset(r, ms);
  return ms === undefined || at === undefined ? null : { offsetMs: ms, at, clock };
}

/** The fan-out of a rotation as recorded, for `meshctl trace`. */
export function traceRotation(r: Rotation): RotationTrace {
  const start = Date.parse(r.requestedAt);
  const holders = Object.entries(r.holders)
    .sort(([a, pa], [b, pb]) => (pa.c ?? Infinity) - (pb.c ?? Infinity) || a.localeCompare(b))
    .map(([holder, p]) => ({
      holder,
      received: event(r, p.r, "holder"),
      applied: event(r, p.a, "holder"),
      // Acks carry the server's time; an ack found in an ack floor, when the rotator found it; old records, the rotator's.
      confirmed: event(r, p.c, p.q !== undefined && !p.f ? "server" : "rotator"),
      ...ackOf(r, holder, p),
      ...(p.f ? { foundInAckFloor: true as const } : {}),
      ...(p.e !== undefined ? { evicted: event(r, p.e, "rotator") } : {}),
    }));
  return {
    ...rotationIdentity(r),
    requestedAt: r.requestedAt,
    deadline: r.deadline,
    ...(r.committedAt ? { committedAt: r.committedAt } : {}),
    ...(r.traceparent ? { traceparent: r.traceparent } : {}),
    states: r.history.map((h) => ({ state: h.state, offsetMs: Math.max(0, Date.parse(h.at) - start), at: h.at, clock: "rotator" as const })),
    holders,
    missing: rotationProgress(r).missing,
  };
}

/** `+1.234 s` (always seconds with milliseconds, so a column of them lines up). */
function offset(ms: number): string {
  return `+${(ms / 1000).toFixed(3)} s`;
}

/** The timeline as text: the rotation's states, then one block per holder. */
export function formatTrace(t: RotationTrace, opts: { color?: boolean; width?: number } = {}): string {
  const s = makeStyle(opts.color ?? false);
  const width = opts.width ?? 80;
  const lines = [
    `${s.bold(`rotation ${t.rotation}`)}  generation ${t.from} → ${t.to}  ${t.state}`,
    `  started ${t.requestedAt}, deadline ${t.deadline}${t.traceparent ? `\n  traceparent ${t.traceparent}` : ""}`,
    "",
    s.bold("rotator"),
  ];
  const row = (label: string, e: TraceEvent | null) =>
    e ? `    ${label.padEnd(20)}${offset(e.offsetMs).padStart(12)}  ${s.dim(`${e.at}  ${e.clock}'s clock`)}` : `    ${label.padEnd(20)}${"-".padStart(12)}`;
  for (const st of t.states) lines.push(row(st.state, st));
  for (const h of t.holders) {
    lines.push("", `${s.bold(h.holder)}${h.confirmed ? "" : `  ${s.bad("not confirmed")}`}`);
    if (h.received || h.applied) lines.push(row("broadcast received", h.received), row("applied", h.applied));
    lines.push(row(h.foundInAckFloor ? "confirmed (found)" : "confirmed", h.confirmed));
    if (h.stream)
      lines.push(...wrapText(`acknowledged seq ${h.ackedSeq ?? "?"} on consumer ${h.consumer} of stream ${h.stream}`, width, "    ").map((l) => s.dim(l)));
  }
  if (t.holders.length === 0) lines.push("", "no holder had to confirm (none held the grant when the rotation started)");
  if (t.missing.length) lines.push("", ...wrapText(`not confirmed: ${listHolders(t.missing)}`, width));
  lines.push(
    "",
    ...wrapText(
      "times: the rotator's states by the rotator's clock; a confirmation is the holder's JetStream ack of the broadcast, timed by the NATS server (its ack metric, or the consumer's last activity); one marked (found) was read from the consumer's ack floor by a rotator that started after it, and is timed when it was found",
      width,
    ),
  );
  return lines.join("\n");
}
