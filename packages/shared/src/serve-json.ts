import type { MsgHdrs, NatsConnection } from "@nats-io/transport-node";
import { isInboxSubject } from "./inboxes.js";
import { ErrorCodes, MeshError, errorMessage } from "./errors.js";
import { Limits } from "./limits.js";
import type { Logger } from "./logger.js";
import { microEndpoints } from "./micro-service.js";
import { endpointName } from "./micro.js";
import { recordRequest } from "./metrics.js";
import { requesterName, requesterOf, type AuditedRequest, type Requester } from "./audit.js";
import { AuditLog } from "./audit-log.js";

/** What serveJson tells a handler of the request beside its body. */
export interface ServedRequest {
  subject: string;
  headers?: MsgHdrs;
  /** Who sent it, as its subject says (audit.ts `requesterOf`): never the body. */
  requester: Requester;
}

/** A request that cannot be recorded, answered instead of serving it (the error audit.ts's writer throws). */
function refusal(e: unknown): string {
  const err = e instanceof MeshError ? e.toJSON() : { code: ErrorCodes.Unavailable, message: errorMessage(e), retryable: true };
  return JSON.stringify({ ok: false, error: err });
}

/**
 * Answers requests on `subject` in a queue group with JSON; a handler that throws gets a
 * structured error reply (`{ok:false, error:{code,message,retryable}}`), never a timeout.
 * At most `maxInFlight` requests (default {@link Limits.requestsInFlight}) are worked on at
 * once; one more is answered at once with a retryable `Unavailable`, so a flood costs the
 * service a bounded amount of memory and its callers a retry, not a timeout. What it served is
 * counted for the NATS micro protocol's STATS of the service on `nc` (micro-service.ts), and in
 * the process's metrics (metrics.ts), by the subject's endpoint name.
 *
 * `subject` may be several: an operator's request is served on its bare subject (the bootstrap
 * admin's) and on every named operator's (audit.ts `operatorSubjectsOf`), in one endpoint. With
 * `audit`, every request is recorded in the audit trail before it is answered (audit.ts): a
 * change also before it is worked on; one the trail does not take is refused unserved.
 */
export function serveJson(
  nc: NatsConnection,
  subject: string | readonly string[],
  queue: string,
  log: Logger,
  handler: (body: unknown, msg: ServedRequest) => Promise<unknown>,
  opts: { maxInFlight?: number; audit?: { log: AuditLog; request: AuditedRequest } } = {},
): { stop(): Promise<void> } {
  const all = typeof subject === "string" ? [subject] : [...subject];
  const subs = all.map((s) => serveOne(nc, s, all[0]!, queue, log, handler, opts));
  return { stop: async () => void (await Promise.all(subs.map((s) => s.drain()))) };
}

function serveOne(
  nc: NatsConnection,
  subject: string,
  endpointSubject: string,
  queue: string,
  log: Logger,
  handler: (body: unknown, msg: ServedRequest) => Promise<unknown>,
  opts: { maxInFlight?: number; audit?: { log: AuditLog; request: AuditedRequest } },
) {
  const maxInFlight = opts.maxInFlight ?? Limits.requestsInFlight;
  const busy = JSON.stringify({
    ok: false,
    error: { code: ErrorCodes.Unavailable, message: `this instance is working on ${maxInFlight} requests on ${subject} already; try again`, retryable: true },
  });
  let inFlight = 0;
  let shed = 0;
  const record = microEndpoints(nc).add(subject, queue);
  const endpoint = endpointName(endpointSubject);
  const audit = opts.audit;
  const sub = nc.subscribe(subject, { queue });
  void (async () => {
    for await (const m of sub) {
      // An answer goes only to an inbox: this identity may answer once whatever a request's reply
      // names, so a reply naming another holder's $JS.ACK… would have it acknowledge for the sender.
      if (m.reply && !isInboxSubject(m.reply)) {
        log.warn({ subject }, "a request whose reply subject is not an inbox was dropped unanswered");
        continue;
      }
      if (inFlight >= maxInFlight) {
        m.respond(busy);
        // Logged once per burst, not once per refused request.
        if (shed++ === 0) log.warn({ subject, maxInFlight }, "too many requests in flight: answering busy until some finish");
        continue;
      }
      if (shed > 0) {
        log.info({ subject, shed }, "requests in flight below the limit again");
        shed = 0;
      }
      inFlight++;
      const began = performance.now();
      let failed: string | undefined;
      let failedCode: string | undefined;
      void (async () => {
        let body: unknown;
        try {
          body = m.data.length ? m.json() : {};
        } catch {
          failedCode = ErrorCodes.InvalidRequest;
          failed = `${failedCode}: the request body is not JSON`;
          m.respond(JSON.stringify({ ok: false, error: { code: ErrorCodes.InvalidRequest, message: "the request body is not JSON", retryable: false } }));
          return;
        }
        const requester = requesterOf(m.subject);
        // What the trail says of it: worked out once, from the body and subject alone.
        const entry = audit && { id: AuditLog.newId(), who: requesterName(requester), ...describeSafely(audit.request, body, m.subject) };
        if (audit && entry && audit.request.change) {
          try {
            await audit.log.record({ ...entry, phase: "request" });
          } catch (e) {
            failedCode = ErrorCodes.Unavailable;
            failed = `${failedCode}: the audit trail did not record the request`;
            log.error({ err: e, subject }, "the audit trail did not record a request: refused");
            m.respond(refusal(e));
            return;
          }
        }
        let answer: string;
        try {
          const reply = await handler(body, { subject: m.subject, headers: m.headers, requester });
          answer = JSON.stringify(reply);
        } catch (e) {
          const err = e instanceof MeshError ? e.toJSON() : { code: ErrorCodes.Internal, message: errorMessage(e), retryable: true };
          if (!(e instanceof MeshError)) log.error({ err: e, subject }, "request handler failed");
          failedCode = err.code;
          failed = `${err.code}: ${err.message}`;
          answer = JSON.stringify({ ok: false, error: err });
        }
        if (audit && entry) {
          try {
            await audit.log.record({ ...entry, phase: "outcome", outcome: failedCode ?? "ok", ...(failed ? { message: failed.slice(0, 1_024) } : {}) });
          } catch (e) {
            log.error({ err: e, subject, request: entry.id }, "the audit trail did not record a request's outcome");
            // A read is refused unrecorded; a change was recorded before it was worked on, and is answered.
            if (!audit.request.change) {
              failedCode = ErrorCodes.Unavailable;
              failed = `${failedCode}: the audit trail did not record the request`;
              answer = refusal(e);
            }
          }
        }
        m.respond(answer);
      })().finally(() => {
        inFlight--;
        const elapsedMs = performance.now() - began;
        record(elapsedMs, failed);
        recordRequest(endpoint, elapsedMs / 1000, failedCode);
      });
    }
  })();
  return sub;
}

/** The action and target of a request as `request` describes them; a body it cannot read is still recorded, as what its subject says. */
function describeSafely(request: AuditedRequest, body: unknown, subject: string): ReturnType<AuditedRequest["describe"]> {
  try {
    return request.describe(body, subject);
  } catch {
    return { action: endpointName(subject) };
  }
}
