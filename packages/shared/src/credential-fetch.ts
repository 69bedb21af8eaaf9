/**
 * Fetching a delivered credential's values, as every holder does it (the node agent and the
 * client SDK alike): a {@link CredentialFetchRequest} on the subject of its grant, node and
 * part (`subjects.credentialFetch`) carrying the holder's public xkey, and a reply whose values
 * are sealed to that key.
 */
import type { MsgHdrs, NatsConnection } from "@nats-io/transport-node";
import type { KeyPair } from "@nats-io/nkeys";
import { ErrorCodes, MeshError } from "./errors.js";
import { openFrom } from "./crypto.js";
import { CredentialFetchReply, CredentialValues, type CredentialFetchRequest } from "./schemas/events.js";
import { parseGrantId, subjects } from "./subjects.js";
import { NAME_RULE, isValidName } from "./names.js";
import { errorFromReply, requestJson } from "./request-json.js";

/** Which credential to fetch: one generation of a grant, for one part on one node. */
export type CredentialFetchTarget = Omit<CredentialFetchRequest, "recipient">;

export interface FetchCredentialOptions {
  /** How long to wait for the provisioner's reply; default 5 s. */
  timeoutMs?: number;
  /** Headers to send (e.g. `traceHeaders()` so the provisioner's span joins the holder's trace). */
  headers?: MsgHdrs;
  /** Ask for the part's rotation key too (an SDK instance: it opens its rotations' values with it). */
  partKey?: boolean;
}

/** A fetched, opened credential. */
export interface FetchedCredential {
  generation: number;
  values: CredentialValues;
  /** The key the provisioner sealed them with: the mesh's sealing key. */
  sender: string;
  /** The part's rotation key (base64; secret), when asked for and sent. */
  partKey?: string;
}

/**
 * The subject a fetch of `target` goes to; throws MeshError `InvalidName` when the grant id,
 * node or part is not a valid name.
 */
export function credentialFetchSubject(target: Pick<CredentialFetchTarget, "grant" | "node" | "part">): string {
  const id = parseGrantId(target.grant);
  if (!id || !isValidName(target.node) || !isValidName(target.part)) {
    throw new MeshError(
      ErrorCodes.InvalidName,
      `cannot fetch ${JSON.stringify(target.grant)} for ${JSON.stringify(target.part)} on ${JSON.stringify(target.node)}: the grant must be <module>/<requirement> and every name ${NAME_RULE}`,
    );
  }
  return subjects.credentialFetch(id.module, id.requirement, target.node, target.part);
}

/**
 * Requests generation `target.generation` of `target.grant` for `target.part` on
 * `target.node`, sealed to `key`'s public xkey, and opens it with `key`.
 *
 * Throws a {@link MeshError}: `Unavailable` (retryable) when no provisioner answers in time;
 * the provisioner's own error (code, message, retryable as it said) when it refuses; `Decrypt`
 * when the reply does not open with `key`; `Internal` when the reply is malformed or carries
 * another generation than the one asked for. The values never appear in an error message.
 */
export async function fetchCredential(
  nc: NatsConnection,
  target: CredentialFetchTarget,
  key: KeyPair,
  opts: FetchCredentialOptions = {},
): Promise<FetchedCredential> {
  const req: CredentialFetchRequest = { ...target, recipient: key.getPublicKey(), ...(opts.partKey ? { partKey: true } : {}) };
  const subject = credentialFetchSubject(target);
  const body = await requestJson(nc, subject, req, {
    service: "provisioner",
    timeoutMs: opts.timeoutMs ?? 5_000,
    ...(opts.headers ? { headers: opts.headers } : {}),
  });
  const refused = errorFromReply(
    body,
    `the provisioner refused credential ${target.grant} generation ${target.generation} for ${target.part}@${target.node}: `,
  );
  if (refused) throw refused;
  const reply = CredentialFetchReply.safeParse(body);
  if (!reply.success || !reply.data.ok) {
    throw new MeshError(ErrorCodes.Internal, `the reply on ${subject} does not match its schema`, { retryable: true });
  }
  if (reply.data.generation !== target.generation) {
    throw new MeshError(
      ErrorCodes.Internal,
      `asked for generation ${target.generation} of ${target.grant} but the provisioner sent generation ${reply.data.generation}`,
      { retryable: false },
    );
  }
  let opened: unknown;
  try {
    opened = openFrom(key, reply.data.sender, reply.data.sealed);
  } catch (e) {
    if (e instanceof MeshError) throw e;
    // No cause attached: a JSON parse error quotes its input, and the input is secret.
    throw new MeshError(ErrorCodes.Decrypt, `credential ${target.grant} generation ${target.generation} did not open: the sealed reply is malformed`);
  }
  const values = CredentialValues.safeParse(opened);
  if (!values.success) {
    // Do not echo the parse error: zod may quote the input, and the input is secret.
    throw new MeshError(ErrorCodes.Internal, `credential ${target.grant} generation ${target.generation} is not a map of string values`, { retryable: false });
  }
  let partKey: string | undefined;
  if (reply.data.partKey) {
    try {
      const k = openFrom(key, reply.data.sender, reply.data.partKey) as { key?: unknown };
      if (typeof k?.key === "string") partKey = k.key;
    } catch {
      // Not opened: the holder fetches each rotation's values instead.
    }
  }
  return { generation: reply.data.generation, values: values.data, sender: reply.data.sender, ...(partKey ? { partKey } : {}) };
}
