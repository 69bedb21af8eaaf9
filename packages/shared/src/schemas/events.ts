/**
 * Messages on the wire: requests, replies and events. JSON Schemas of these are generated
 * into `schemas/` at the repository root for modules written in other languages.
 */
import { z } from "zod";
import { KIND_LIST } from "../kinds.js";

/** Request on `mesh.api.apply`: documents as decoded from YAML or JSON. */
export const ApplyRequest = z.object({
  documents: z.array(z.unknown()),
  /** Where the documents came from (a file name), for messages. */
  source: z.string().optional(),
  /** Apply what the control plane protects itself from (removing a requirement of module `mesh`). */
  force: z.boolean().optional(),
});
export type ApplyRequest = z.infer<typeof ApplyRequest>;

export const AppliedDocument = z.object({
  kind: z.enum(["Provider", "Module"]),
  name: z.string(),
  /** `created`, `updated` or `unchanged`. */
  action: z.enum(["created", "updated", "unchanged"]),
});
export type AppliedDocument = z.infer<typeof AppliedDocument>;

export const Problem = z.object({ document: z.number(), path: z.string(), message: z.string() });

/** Reply to an apply: everything accepted, or nothing stored and every problem listed. */
export const ApplyReply = z.discriminatedUnion("ok", [
  z.object({ ok: z.literal(true), accepted: z.array(AppliedDocument) }),
  z.object({ ok: z.literal(false), problems: z.array(Problem) }),
]);
export type ApplyReply = z.infer<typeof ApplyReply>;

/**
 * Request on `mesh.api.delete`: delete modules and providers (by kind and name), and drop what
 * removed grants retained (`retained`: grant ids). All or nothing: any problem deletes nothing.
 * Deleting module `mesh`, or a provider that still serves grants, needs `force`.
 */
export const DeleteRequest = z.object({
  documents: z.array(z.object({ kind: z.enum(["Provider", "Module"]), name: z.string().max(64) })).max(256).default([]),
  retained: z.array(z.string().max(128)).max(256).default([]),
  force: z.boolean().optional(),
});
export type DeleteRequest = z.infer<typeof DeleteRequest>;

/** Reply to a delete: what was deleted (a module's grants are then taken back), or nothing and every problem. */
export const DeleteReply = z.discriminatedUnion("ok", [
  z.object({ ok: z.literal(true), deleted: z.array(z.object({ kind: z.enum(["Provider", "Module", "Retained"]), name: z.string() })) }),
  z.object({ ok: z.literal(false), problems: z.array(Problem) }),
]);
export type DeleteReply = z.infer<typeof DeleteReply>;

/**
 * Event on `mesh.delivery.<node>.<module>.<part>.<requirement>` (stream MESH_DELIVERIES):
 * generation `generation` of a grant is ready for that part. It carries no secret value;
 * the holder fetches the values with a {@link CredentialFetchRequest}.
 */
export const Delivery = z.object({
  grant: z.string(),
  module: z.string(),
  requirement: z.string(),
  part: z.string(),
  node: z.string(),
  kind: z.enum(KIND_LIST),
  provider: z.string(),
  generation: z.number().int().positive(),
  publishedAt: z.string(),
  /** Set when the generation is staged by a rotation (its id): the holder confirms once it applied it. */
  rotation: z.string().optional(),
  /** Set when the part is no longer a target of the grant: the agent removes its binding, and the receipt says so. */
  withdraw: z.literal(true).optional(),
  /** The requirement's `env` (variable → binding key): the names the application reads the values under. */
  env: z.record(z.string(), z.string()).optional(),
});
export type Delivery = z.infer<typeof Delivery>;

/**
 * Request on `mesh.api.credential.fetch.<module>.<requirement>.<node>.<part>` (the subject names
 * what the body does, or it is refused): the values of one generation of a grant, for a part
 * the grant is delivered to. `recipient` is the caller's curve25519 public key (an nkeys
 * xkey): the values come back sealed to it, so nothing between sees them.
 */
export const CredentialFetchRequest = z.object({
  grant: z.string(),
  part: z.string(),
  node: z.string(),
  generation: z.number().int().positive(),
  recipient: z.string(),
  /** Also send the part's rotation key (part-rotation-key.ts), sealed to `recipient`: SDK instances open the rotations' values with it. */
  partKey: z.boolean().optional(),
});
export type CredentialFetchRequest = z.infer<typeof CredentialFetchRequest>;

export const ErrorReply = z.object({ code: z.string(), message: z.string(), retryable: z.boolean() });
export type ErrorReply = z.infer<typeof ErrorReply>;

/** The binding values of one generation of a grant, key → value (`type`, `username`, `password`, …). Secret: never log them. */
export const CredentialValues = z.record(z.string(), z.string());
export type CredentialValues = z.infer<typeof CredentialValues>;

export const CredentialFetchReply = z.discriminatedUnion("ok", [
  z.object({
    ok: z.literal(true),
    generation: z.number().int().positive(),
    /** Public xkey of the sender, needed to open `sealed`. */
    sender: z.string(),
    /** Base64 of the sealed JSON object of binding values (key → string). */
    sealed: z.string(),
    /** When asked: the part's rotation key, sealed to the recipient (`{ key }`, base64). */
    partKey: z.string().optional(),
  }),
  z.object({ ok: z.literal(false), error: ErrorReply }),
]);
export type CredentialFetchReply = z.infer<typeof CredentialFetchReply>;

/**
 * Reply to a request on `mesh.api.credential.list.<module>.<node>.<part>` (its body is empty: the
 * subject says who asks): the current delivery of every grant of the module delivered to that
 * part on that node, as the Delivery a holder would have received. Served by the provisioner; what
 * `watchCredentials` on a part's identity starts from.
 */
export const CredentialListReply = z.discriminatedUnion("ok", [
  z.object({ ok: z.literal(true), deliveries: z.array(Delivery) }),
  z.object({ ok: z.literal(false), error: ErrorReply }),
]);
export type CredentialListReply = z.infer<typeof CredentialListReply>;

/** The record of an agent, written when it starts and refreshed while it runs. */
export const NodeRecord = z.object({
  node: z.string(),
  agent: z.string(),
  bindingsRoot: z.string(),
  startedAt: z.string(),
  seenAt: z.string(),
});
export type NodeRecord = z.infer<typeof NodeRecord>;
