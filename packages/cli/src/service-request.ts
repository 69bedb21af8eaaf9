/**
 * One request of meshctl to a service of the mesh (the resolver, the rotator), through
 * requestJson, so that every command says the same things the same way:
 *
 * - no instance of the service runs: exit 7 (`ServiceUnavailable`), retryable, with how to start it;
 * - none answered in time: exit 7, retryable, with what may have happened anyway;
 * - the request failed otherwise: exit 1, naming the innermost cause;
 * - the service refused (a structured error reply): the service's message, with the exit code
 *   its error code stands for ({@link exitCodeOf}).
 */
import { ErrorCodes, type ErrorCode } from "@mesh/shared";
import { errorFromReply, requestJson, type NatsConnection } from "@mesh/shared/runtime";
import { CliError } from "./cli-error.js";
import { ExitCodes, type ExitCode } from "./exit-codes.js";
import { isNoResponders, isRequestTimeout, rootMessage } from "./nats-errors.js";
import { meshctlCommand, serviceCommand } from "./paths.js";
import { requestSubject } from "./operator-identity.js";

/** A service meshctl sends requests to. */
export type MeshService = "resolver" | "rotator";

/** What one request is, for its messages. */
export interface ServiceRequest {
  /** The request: `apply`, `delete`, `rotate`, `evict`. */
  what: string;
  service: MeshService;
  timeoutMs: number;
  /** What may have happened anyway when no answer came in time (`the documents may or may not be stored`). */
  ifTimedOut: string;
  /** Sent as it is, already encoded as JSON (a large apply). */
  encoded?: boolean;
}

/** How to start `service` when none answers at `url`; `what` names what was therefore not done. */
export function notRunningMessage(service: MeshService, url: string, notDone: string): string {
  const lines = [
    `no ${service} answers at ${url}: the ${service} is not running, so ${notDone}.`,
    `Start the whole mesh on this machine with:  ${meshctlCommand()} up${service === "resolver" ? " -f FILE" : ""}`,
    `or only the ${service} with:${" ".repeat(Math.max(1, 19 - service.length))}NATS_URL=${url} ${serviceCommand(service)}`,
  ];
  if (service === "rotator") lines.push("(it needs the provisioner's master key: MESH_MASTER_KEY_FILE), or the mesh-rotator systemd unit.");
  return lines.join("\n");
}

/** What is not done when no `service` runs, for {@link notRunningMessage}. */
const NOT_DONE: Record<string, string> = {
  apply: "nothing was applied",
  delete: "nothing was deleted",
  rotate: "nothing was rotated",
  evict: "nobody was evicted",
};

/** The URL of the server `nc` is connected to, with its scheme. */
export function serverUrlOf(nc: NatsConnection): string {
  const server = nc.getServer();
  return server.includes("://") ? server : `nats://${server}`;
}

/** meshctl's exit code for a service's refusal with `code`: 5 for NotFound, 2 for a request it calls invalid, else 1. */
export function exitCodeOf(code: ErrorCode): ExitCode {
  return code === ErrorCodes.NotFound ? ExitCodes.NotFound : code === ErrorCodes.InvalidRequest ? ExitCodes.Usage : ExitCodes.Failure;
}

/**
 * Sends `body` on `subject` to `req.service` and returns its reply, decoded; throws a
 * {@link CliError} as the file's comment says. A structured error reply is returned as it is
 * (some commands read the record to tell two refusals apart): {@link refusal} makes it an error.
 */
export async function requestService(nc: NatsConnection, subject: string, body: unknown, req: ServiceRequest): Promise<unknown> {
  try {
    return await requestJson(nc, requestSubject(nc, subject), body, {
      service: req.service,
      timeoutMs: req.timeoutMs,
      ...(req.encoded ? { encoded: true } : {}),
    });
  } catch (e) {
    if (isNoResponders(e)) {
      throw new CliError(notRunningMessage(req.service, serverUrlOf(nc), NOT_DONE[req.what] ?? `the ${req.what} was not done`), ExitCodes.ServiceUnavailable, {
        cause: e,
        retryable: true,
      });
    }
    if (isRequestTimeout(e)) {
      throw new CliError(`the ${req.service} did not answer within ${Math.round(req.timeoutMs / 1000)} s; ${req.ifTimedOut}`, ExitCodes.ServiceUnavailable, {
        cause: e,
        retryable: true,
      });
    }
    throw new CliError(`the ${req.what} request failed: ${rootMessage(e)}`, ExitCodes.Failure, { cause: e });
  }
}

/** The CliError a structured error reply stands for (`the rotator refused: …`), or undefined when `reply` is none. */
export function refusal(reply: unknown, service: MeshService): CliError | undefined {
  const refused = errorFromReply(reply);
  if (!refused) return undefined;
  const said = /[.!?]$/.test(refused.message) ? refused.message : `${refused.message}.`;
  const retry = refused.retryable ? " Trying again later may succeed." : "";
  return new CliError(`the ${service} refused: ${said}${retry}`, exitCodeOf(refused.code), { cause: refused, retryable: refused.retryable });
}

/** A reply meshctl cannot read: most likely meshctl and the service are of different versions. */
export function notUnderstood(service: MeshService): CliError {
  return new CliError(`the ${service} sent a reply meshctl does not understand; are meshctl and the ${service} of the same version?`);
}
