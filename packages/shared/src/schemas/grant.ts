/**
 * Grants and module states, the records the services share through KV.
 */
import { z } from "zod";
import { Condition } from "../conditions.js";
import { KIND_LIST } from "../kinds.js";
import { RepairEvent, RepairPolicy, VerifyPolicy } from "./verification.js";
import { RequirementOptions } from "./manifest.js";

/** A part that a grant is delivered to: installed, and naming the requirement. */
export const GrantTarget = z.object({ part: z.string(), node: z.string() });
export type GrantTarget = z.infer<typeof GrantTarget>;

/** What one holder (a part on a node) has been delivered. Key in {@link Grant.holders}: `<node>/<part>`. */
export const HolderState = z.object({
  generation: z.number().int().nonnegative(),
  deliveredAt: z.string(),
  /** The fingerprint (`envDigest`) of the grant's `env` its env file was written with; absent: none. */
  env: z.string().optional(),
  /** When the node's agent wrote this generation again because its bindings were gone from the node (a root emptied, a node re-imaged). */
  restoredAt: z.string().optional(),
});
export type HolderState = z.infer<typeof HolderState>;

/** The longest message a receipt carries (a delivery's failure, a hook's); longer ones are cut there by the agent. */
export const RECEIPT_MESSAGE_MAX = 2_048;

/**
 * What node `<node>`'s agent did with grant `<module>/<requirement>` for part `<part>` on its
 * node, written by that agent alone: its identity may write `mesh-receipts.<node>.>` and no
 * grant. The provisioner folds it into the grant ({@link Grant.holders}, `Delivered`, a hook's
 * failure on `Rotating`). The key (`keys.receipt`) names the holder and the grant; the value
 * says only what happened, so there is nothing in it to disagree with the key.
 */
export const DeliveryReceipt = z.object({
  /** The newest generation written to the part's binding; 0 while none is. */
  generation: z.number().int().nonnegative(),
  /** When it was written, or found written and recorded again (new each time, so a holder the grant lost is folded in again). */
  deliveredAt: z.string().optional(),
  /** A delivery of generation `generation` (newer than the one held) that cannot succeed as things are, and why. */
  failure: z.object({ generation: z.number().int().positive(), message: z.string().max(RECEIPT_MESSAGE_MAX), at: z.string() }).optional(),
  /** The part's onRotate hook in rotation `rotation` (to `generation`): failed, and why; without `failed`, it ran. */
  /** When the agent removed the part's binding of this grant (the part is no longer a target): the holder holds nothing. */
  withdrawnAt: z.string().optional(),
  hook: z
    .object({
      rotation: z.string().max(200),
      generation: z.number().int().positive(),
      failed: z.object({ reason: z.enum(["HookNotAllowed", "HookFailed"]), message: z.string().max(RECEIPT_MESSAGE_MAX), at: z.string() }).optional(),
    })
    .optional(),
  /**
   * The part applied generation `generation` of rotation `rotation`: its files written, its hook
   * run, a login with it proven from the node. Written after that and before the agent
   * acknowledges the rotation's message: the rotator counts an agent-held part as confirmed only
   * when both say so (the ack on the holder's own consumer, and this, which only that node's
   * agent may write), so a forged ack alone commits nothing.
   */
  confirmed: z.object({ rotation: z.string().max(200), generation: z.number().int().positive() }).optional(),
  /** The fingerprint (`envDigest`) of the grant's `env` the part's env file was written with; absent: none. */
  env: z.string().max(64).optional(),
  /** The agent found generation `generation` gone from the part's bindings (a root emptied, a node re-imaged) and wrote it again at `at`, without a rotation. */
  restored: z.object({ generation: z.number().int().positive(), at: z.string() }).optional(),
});
export type DeliveryReceipt = z.infer<typeof DeliveryReceipt>;

export const Grant = z.object({
  /** `<module>/<requirement>`. */
  id: z.string(),
  module: z.string(),
  requirement: z.string(),
  kind: z.enum(KIND_LIST),
  /** Parts that name the requirement (installed or not). */
  parts: z.array(z.string()),
  /** Installed parts that name it: where it is delivered. Empty: not provisioned. */
  targets: z.array(GrantTarget),
  /** The provider chosen by the resolver, or null when none can be. */
  provider: z.string().nullable(),
  /** Current credential generation; 0 until first provisioned. */
  generation: z.number().int().nonnegative(),
  /** Non-secret description of the resource (names of the role and database…), set by the provisioner. */
  resource: z.record(z.string(), z.string()).default({}),
  holders: z.record(z.string(), HolderState).default({}),
  /** When the resolver made the grant: a grant deleted and declared again starts at generation 1 anew, and this tells the two apart. */
  createdAt: z.string().optional(),
  /** Holders (`<node>/<part>`) whose binding was withdrawn, and when, until they hold the grant again (see `deliveryMsgId`). */
  withdrawn: z.record(z.string(), z.string()).optional(),
  conditions: z.array(Condition),
  /** The requirement's `verify:` policy, copied by the resolver (absent: the verifier's default interval). */
  verify: VerifyPolicy.optional(),
  /** The requirement's `repair:` policy, copied by the resolver (absent: `auto`). */
  repair: RepairPolicy.optional(),
  /** The requirement's kind-specific `options:`, copied by the resolver for the adapter. */
  options: RequirementOptions.optional(),
  /** The requirement's `env:` (variable → binding key), copied by the resolver for the agents and the SDK. */
  env: z.record(z.string(), z.string()).optional(),
  /** The verifier's repairs of this grant, oldest first, at most REPAIR_HISTORY_LIMIT (the newest). */
  repairs: z.array(RepairEvent).optional(),
  /** The requirement's `deletionPolicy:`, copied by the resolver (absent: its kind's default, `deletionPolicyOf`). */
  deletionPolicy: z.enum(["Retain", "Delete"]).optional(),
  /**
   * Set by the resolver when the module no longer declares the requirement (or the module was
   * deleted): the grant is taken back — revoked at its provider, its values purged, its bindings
   * removed from the nodes — and then removed (or kept as `retained`).
   */
  removal: z.object({ requestedAt: z.string(), reason: z.string().max(1_024) }).optional(),
  /**
   * Set by the provisioner once no installed part needed the grant and it was taken back at its
   * provider: every generation up to `generation` no longer logs in, the store holds no value of
   * them, and the resource was dropped (`dropped`) or its data kept. A part that needs it again
   * gets a fresh generation (generation + 1) on what was kept.
   */
  revoked: z
    .object({
      at: z.string(),
      generation: z.number().int().nonnegative(),
      dropped: z.boolean(),
      /** False while it is being done (recorded first, so a grant needed again meanwhile gets a fresh generation); absent or true once done. */
      done: z.boolean().optional(),
    })
    .optional(),
  /** The grant's revocations (`meshctl revoke`), oldest first, the newest 20: which generation, when, by whom, why, and who was locked out. */
  revocations: z
    .array(z.object({ rotation: z.string(), generation: z.number().int().positive(), at: z.string(), by: z.string().optional(), reason: z.string().optional(), lockedOut: z.array(z.string()) }))
    .max(20)
    .optional(),
  /** What was kept of a removed grant's resource (its data), since when: listed by meshctl status until `meshctl delete retained`, or adopted by declaring it again. */
  retained: z.object({ since: z.string() }).optional(),
});
export type Grant = z.infer<typeof Grant>;

export const ModuleStates = {
  NothingRequired: "NothingRequired",
  /** The module was deleted and its grants are being taken back; the message says what remains. */
  Deleting: "Deleting",
  /** The module was deleted and all is taken back but data kept by `deletionPolicy: Retain`, which the message lists. */
  Deleted: "Deleted",
  Pending: "Pending",
  Ready: "Ready",
  Degraded: "Degraded",
  Unsatisfiable: "Unsatisfiable",
} as const;
export type ModuleState = (typeof ModuleStates)[keyof typeof ModuleStates];

/** The resolver's record of a processed module. Its absence means: never processed. */
export const ModuleStatus = z.object({
  module: z.string(),
  state: z.enum(Object.values(ModuleStates) as [ModuleState, ...ModuleState[]]),
  /** One sentence on why the module is in this state. */
  message: z.string(),
  requirements: z.number().int().nonnegative(),
  /** KV revision of the manifest this state was derived from. */
  manifestRevision: z.number().int().nonnegative(),
  processedAt: z.string(),
  /** When the state last changed. */
  since: z.string(),
});
export type ModuleStatus = z.infer<typeof ModuleStatus>;

/** Holder key in {@link Grant.holders}. */
export function holderKey(node: string, part: string): string {
  return `${node}/${part}`;
}
