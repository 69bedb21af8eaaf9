import type { MsgHdrs, NatsConnection } from "@nats-io/transport-node";
import { isInboxSubject } from "./inboxes.js";
import { ErrorCodes, MeshError, errorMessage } from "./errors.js";
import { Limits } from "./limits.js";
import type { Logger } from "./logger.js";
import { microEndpoints } from "./micro-service.js";
import { endpointName } from "./micro.js";
import { recordRequest } from "./metrics.js";

/**
 * Answers requests on `subject` in a queue group with JSON; a handler that throws gets a
 * structured error reply (`{ok:false, error:{code,message,retryable}}`), never a timeout.
 * At most `maxInFlight` requests (default {@link Limits.requestsInFlight}) are worked on at
 * once; one more is answered at once with a retryable `Unavailable`, so a flood costs the
 * service a bounded amount of memory and its callers a retry, not a timeout. What it served is
 * counted for the NATS micro protocol's STATS of the service on `nc` (micro-service.ts), and in
 * the process's metrics (metrics.ts), by the subject's endpoint name.
 */
export function serveJson(
  nc: NatsConnection,
  subject: string,
  queue: string,
  log: Logger,
  handler: (body: unknown, msg: { subject: string; headers?: MsgHdrs }) => Promise<unknown>,
  opts: { maxInFlight?: number } = {},
): { stop(): Promise<void> } {
  const maxInFlight = opts.maxInFlight ?? Limits.requestsInFlight;
  const busy = JSON.stringify({
    ok: false,
    error: { code: ErrorCodes.Unavailable, message: `this instance is working on ${maxInFlight} requests on ${subject} already; try again`, retryable: true },
  });
  let inFlight = 0;
  let shed = 0;
  const record = microEndpoints(nc).add(subject, queue);
  const endpoint = endpointName(subject);
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
        try {
          const reply = await handler(body, { subject: m.subject, headers: m.headers });
          m.respond(JSON.stringify(reply));
        } catch (e) {
          const err = e instanceof MeshError ? e.toJSON() : { code: ErrorCodes.Internal, message: errorMessage(e), retryable: true };
          if (!(e instanceof MeshError)) log.error({ err: e, subject }, "request handler failed");
          failedCode = err.code;
          failed = `${err.code}: ${err.message}`;
          m.respond(JSON.stringify({ ok: false, error: err }));
        }
      })().finally(() => {
        inFlight--;
        const elapsedMs = performance.now() - began;
        record(elapsedMs, failed);
        recordRequest(endpoint, elapsedMs / 1000, failedCode);
      });
    }
  })();
  return { stop: () => sub.drain() };
}
