/**
 * `meshctl audit`: reads the audit trail (stream MESH_AUDIT, audit.ts in @mesh/shared): one line
 * per request, who asked, what, of which grant, and what came of it. A change's two records (its
 * request, before it was worked on, and its outcome) are joined by their id.
 */
import { DeliverPolicy, jetstream, type JsMsg } from "@nats-io/jetstream";
import { AuditRecord, Streams, isConsoleAuditSubject, parseDuration, readableRecord, requesterName, requesterOf } from "@mesh/shared";
import type { NatsConnection } from "@mesh/shared/runtime";
import { CliError } from "./cli-error.js";
import { ExitCodes } from "./exit-codes.js";
import type { Output } from "./output.js";
import { rootMessage } from "./nats-errors.js";

/** How long one pull of the trail waits for records. */
const FETCH_EXPIRES_MS = 2_000;

/** One request as `audit` prints it. */
export interface AuditLine {
  id: string;
  at: string;
  who: string;
  action: string;
  grant?: string;
  target?: AuditRecord["target"];
  /** `ok`, an error code, or `unknown` for a change whose outcome was not recorded (the service stopped, or the trail refused it). */
  outcome: string;
  message?: string;
  service: string;
  node: string;
}

export interface AuditOptions {
  /** A duration back from now (`1h`) or a time (ISO 8601). */
  since?: string;
  grant?: string;
  /** Who asked: as the trail names it (`operator:alice`, `admin (break-glass)`, `part:shop/api@node-a`), or an operator's name. */
  who?: string;
  json?: boolean;
  /** How many requests at most, the latest; default 1,000. */
  limit?: number;
}

/** The start time `since` names, or undefined; a CliError for one that is neither a duration nor a time. */
export function sinceTime(since: string | undefined, now = Date.now()): Date | undefined {
  if (!since) return undefined;
  try {
    return new Date(now - parseDuration(since));
  } catch {
    const t = Date.parse(since);
    if (Number.isNaN(t))
      throw new CliError(`--since ${JSON.stringify(since)} is neither a duration (1h, 7d) nor a time (2026-12-01T00:00:00Z)`, ExitCodes.Usage);
    return new Date(t);
  }
}

/** Joins each request's records into one line, in the order the requests were made. Pure. */
export function joinRecords(records: readonly AuditRecord[]): AuditLine[] {
  const byId = new Map<string, AuditLine>();
  for (const r of records) {
    const had = byId.get(r.id);
    const base: AuditLine = had ?? {
      id: r.id,
      at: r.at,
      who: r.who,
      action: r.action,
      ...(r.grant ? { grant: r.grant } : {}),
      ...(r.target ? { target: r.target } : {}),
      outcome: "unknown",
      service: r.service,
      node: r.node,
    };
    if (r.phase === "outcome") {
      base.outcome = r.outcome ?? "unknown";
      if (r.message) base.message = r.message;
    }
    byId.set(r.id, base);
  }
  return [...byId.values()];
}

/** True when `line` passes the filters of `o`. Pure. */
export function matches(line: AuditLine, o: Pick<AuditOptions, "grant" | "who">): boolean {
  if (o.grant && line.grant !== o.grant) return false;
  if (o.who && line.who !== o.who && line.who !== `operator:${o.who}`) return false;
  return true;
}

/** Reads every record of the trail from `start` (or its first), through an ordered consumer. */
async function readTrail(nc: NatsConnection, start: Date | undefined): Promise<AuditRecord[]> {
  const js = jetstream(nc);
  let last: number;
  try {
    last = (await (await js.jetstreamManager()).streams.info(Streams.audit)).state.last_seq;
  } catch (e) {
    throw new CliError(
      `could not read the audit trail (stream ${Streams.audit}): ${rootMessage(e)}. meshctl up and bootstrap make it; an identity that may read it is the operator's`,
      ExitCodes.Failure,
      { cause: e },
    );
  }
  if (last === 0) return [];
  const consumer = await js.consumers.get(Streams.audit, start ? { deliver_policy: DeliverPolicy.StartTime, opt_start_time: start.toISOString() } : {});
  const out: AuditRecord[] = [];
  for (;;) {
    const batch = await consumer.fetch({ max_messages: 1_000, expires: FETCH_EXPIRES_MS });
    // A pull the server refused (an identity that may not read the trail) is never answered: the batch is ended.
    const stuck = setTimeout(() => void batch.close(), FETCH_EXPIRES_MS * 5);
    stuck.unref();
    let got = 0;
    let done = false;
    for await (const m of batch as AsyncIterable<JsMsg>) {
      got++;
      const parsed = AuditRecord.safeParse(safeJson(m));
      // A console session's record names who opened it by its subject, which only that identity may publish on.
      if (parsed.success) out.push(isConsoleAuditSubject(m.subject) ? { ...parsed.data, who: requesterName(requesterOf(m.subject)) } : parsed.data);
      if (m.seq >= last || m.info.pending === 0) {
        done = true;
        break;
      }
    }
    clearTimeout(stuck);
    if (done) break;
    if (got === 0) {
      if (out.length === 0 && start === undefined)
        throw new CliError(
          `the audit trail (stream ${Streams.audit}) holds records, but none came: this identity may not read it (the operator's and named operators' may)`,
          ExitCodes.Failure,
        );
      break;
    }
  }
  await consumer.delete().catch(() => undefined);
  return out;
}

/** The record of `m`, or undefined when it is not JSON; one of a newer format than this meshctl reads is refused, naming it. */
function safeJson(m: JsMsg): unknown {
  let raw: unknown;
  try {
    raw = m.json();
  } catch {
    return undefined;
  }
  return readableRecord(raw, `${Streams.audit}/${m.seq}`);
}

/** `meshctl audit`: see the file's comment. */
export async function runAudit(nc: NatsConnection, o: AuditOptions, out: Output): Promise<number> {
  const start = sinceTime(o.since);
  const lines = joinRecords(await readTrail(nc, start))
    .filter((l) => matches(l, o))
    .slice(-(o.limit ?? 1_000));
  if (o.json) {
    out.out(JSON.stringify({ requests: lines }, null, 2));
    return ExitCodes.Ok;
  }
  if (lines.length === 0) {
    out.out(`no request recorded${start ? ` since ${start.toISOString()}` : ""}${o.grant || o.who ? " that matches" : ""}`);
    return ExitCodes.Ok;
  }
  out.out("TIME\tWHO\tACTION\tGRANT\tOUTCOME");
  for (const l of lines) out.out(`${l.at}\t${l.who}\t${l.action}\t${l.grant ?? "-"}\t${l.outcome}${l.message ? ` (${l.message})` : ""}`);
  return ExitCodes.Ok;
}
