/**
 * The client side of {@link serveJson}: a JSON request whose failures are all MeshErrors that
 * say which service to start, and the structured error reply turned back into a MeshError.
 */
import { RequestError, TimeoutError, type MsgHdrs, type NatsConnection } from "@nats-io/transport-node";
import { ErrorCodes, MeshError, errorMessage, type ErrorCode } from "./errors.js";
import { ErrorReply } from "./schemas/events.js";

export interface RequestJsonOptions {
  /** The service that answers, for messages: `resolver`, `provisioner`. */
  service: string;
  /** Default 5 s. */
  timeoutMs?: number;
  headers?: MsgHdrs;
  /** `body` is already encoded (a string or bytes of JSON): sent as it is. */
  encoded?: boolean;
}

/**
 * Sends `body` as JSON on `subject` and returns the decoded reply. Throws a {@link MeshError}
 * `Unavailable` (retryable) when nobody answers or not in time, naming the service to start,
 * and `Internal` when the reply is not JSON.
 */
export async function requestJson(nc: NatsConnection, subject: string, body: unknown, opts: RequestJsonOptions): Promise<unknown> {
  let m;
  try {
    const payload = opts.encoded ? (body as string | Uint8Array) : JSON.stringify(body);
    m = await nc.request(subject, payload, {
      timeout: opts.timeoutMs ?? 5_000,
      ...(opts.headers ? { headers: opts.headers } : {}),
    });
  } catch (e) {
    const noResponders = e instanceof RequestError && e.isNoResponders();
    const timedOut = e instanceof TimeoutError || (e instanceof RequestError && e.cause instanceof TimeoutError);
    throw new MeshError(
      ErrorCodes.Unavailable,
      noResponders
        ? `no ${opts.service} answers on ${subject}; start mesh-${opts.service} (or meshctl up) and try again`
        : timedOut
          ? `the ${opts.service} did not answer on ${subject} within ${opts.timeoutMs ?? 5_000} ms; try again`
          : `request on ${subject} failed: ${errorMessage(e)}`,
      { retryable: true, cause: e },
    );
  }
  try {
    return m.json();
  } catch (e) {
    throw new MeshError(ErrorCodes.Internal, `the ${opts.service}'s reply on ${subject} is not JSON`, { retryable: true, cause: e });
  }
}

/**
 * The MeshError a structured error reply (`{ok:false, error:{code,message,retryable}}`)
 * stands for, with `prefix` before its message; undefined when `reply` is not one.
 * An unknown code becomes `Internal`.
 */
export function errorFromReply(reply: unknown, prefix = ""): MeshError | undefined {
  if (typeof reply !== "object" || reply === null || (reply as { ok?: unknown }).ok !== false) return undefined;
  const err = ErrorReply.safeParse((reply as { error?: unknown }).error);
  if (!err.success) return undefined;
  const { code, message, retryable } = err.data;
  const known = (Object.values(ErrorCodes) as string[]).includes(code) ? (code as ErrorCode) : ErrorCodes.Internal;
  return new MeshError(known, `${prefix}${message}`, { retryable });
}
