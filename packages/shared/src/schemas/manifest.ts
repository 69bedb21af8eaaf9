/**
 * The manifest documents a user applies: `Provider` and `Module`.
 *
 * Validation lists every problem by path (`requires[0].kind: required`), and a file is
 * accepted only as a whole: {@link validateDocuments} (and `parseManifestText`, manifest-text.ts,
 * for a file's text) returns documents or problems, never both.
 */
import { z } from "zod";
import { RotatePolicy } from "./rotation.js";
import { IDENTITY_BINDING, NAME_RULE, NAME_PATTERN, isReservedRequirementName } from "../names.js";
import { parseGrantId } from "../subjects.js";
import { KIND_LIST, Kinds } from "../kinds.js";
import { RepairPolicy, VerifyPolicy } from "./verification.js";
import { Limits } from "../limits.js";

/** "at most N <what>", the message of every list and length limit. */
const atMost = (n: number, what: string) => ({ message: `at most ${n} ${what}` });

export const Name = z.string().regex(NAME_PATTERN, { message: NAME_RULE });

/**
 * `<module>/<requirement>`, both valid names: the shape as a pattern without look-ahead (it
 * goes into the JSON Schemas), the lengths by parsing.
 */
const GrantIdRef = z
  .string()
  .regex(/^[a-z](?:-?[a-z0-9])*\/[a-z](?:-?[a-z0-9])*$/, { message: "must name a grant as <module>/<requirement>" })
  .refine((id) => parseGrantId(id) !== undefined, { message: `must name a grant as <module>/<requirement>, each of which ${NAME_RULE}` });

const AdminCredential = z
  .strictObject({
    username: z.string().min(1).max(63),
    /** Name of an environment variable of the provisioner that holds the admin password. */
    passwordEnv: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, { message: "must be an environment variable name" }).optional(),
    /** Path of a file, readable by the provisioner, that holds the admin password. */
    passwordFile: z.string().min(1).max(Limits.pathChars, atMost(Limits.pathChars, "characters")).optional(),
  })
  .refine((a) => !(a.passwordEnv && a.passwordFile), {
    message: "give passwordEnv or passwordFile, not both",
  });

const OptionName = z.string().regex(/^[a-zA-Z][a-zA-Z0-9]{0,63}$/, { message: "must be a camelCase option name of at most 64 characters" });
const OptionText = z.string().max(Limits.optionChars, atMost(Limits.optionChars, "characters"));

/** At most {@link Limits.optionItems} items in each list option: counted here, not on the array in the union, whose refusal would read only "Invalid input". */
const countItems = (o: Record<string, unknown>, ctx: z.RefinementCtx) => {
  for (const [k, v] of Object.entries(o)) {
    if (Array.isArray(v) && v.length > Limits.optionItems) ctx.addIssue({ code: "custom", path: [k], ...atMost(Limits.optionItems, "items") });
  }
};

/**
 * Kind-specific settings of a provider that its endpoint cannot say (RabbitMQ's management URL,
 * a NATS provider's signing keys and the subjects its users may be given…), each a string or a
 * list of strings; each adapter validates its own and names what is missing.
 */
export const ProviderOptions = z
  .record(OptionName, z.union([OptionText, z.array(OptionText)]))
  .refine((o) => Object.keys(o).length <= Limits.options, atMost(Limits.options, "options"))
  .superRefine(countItems);
export type ProviderOptions = z.infer<typeof ProviderOptions>;

/**
 * Kind-specific settings of a requirement (a `nats.user`'s subjects, a bucket's history…);
 * validated by the kind's adapter when the grant is provisioned.
 */
export const RequirementOptions = z
  .record(OptionName, z.union([OptionText, z.number(), z.boolean(), z.array(OptionText)]))
  .refine((o) => Object.keys(o).length <= Limits.options, atMost(Limits.options, "options"))
  .superRefine(countItems);
export type RequirementOptions = z.infer<typeof RequirementOptions>;

export const ProviderDoc = z.strictObject({
  kind: z.literal("Provider"),
  name: Name,
  serves: z.array(z.enum(KIND_LIST)).min(1).max(Limits.serves, atMost(Limits.serves, "kinds")),
  node: Name,
  /** A URL; for a NATS cluster, its servers' URLs separated by commas (the adapter fails over between them). */
  endpoint: z
    .string()
    .max(Limits.endpointChars, atMost(Limits.endpointChars, "characters"))
    .refine((v) => v.split(",").every((u) => z.url().safeParse(u.trim()).success), {
      message: "must be a URL such as postgres://127.0.0.1:5432 (a NATS cluster's servers: URLs separated by commas, nats://10.0.0.1:4222,nats://10.0.0.2:4222)",
    }),
  admin: AdminCredential.optional(),
  /** Kind-specific settings; see the README's section on each kind. */
  options: ProviderOptions.optional(),
  /**
   * Grants (`<module>/<requirement>`) that must be provisioned before this provider can serve
   * anything: a provider that runs as a module of the mesh needs that module's own
   * requirements first. Until they are, requirements it would serve wait, saying for what.
   */
  needs: z.array(GrantIdRef).max(Limits.needs, atMost(Limits.needs, "grants")).optional(),
  /**
   * Higher wins. A grant moves from its provider to an installed one with a higher preference
   * (a handover, through the same fan-out as a rotation); between equals it stays where it is.
   */
  preference: z.number().int().min(-1000).max(1000).optional(),
  installed: z.boolean().default(true),
});
export type ProviderDoc = z.infer<typeof ProviderDoc>;

/** The longest stretch of a refused `onRotate` quoted back in its message. */
const QUOTED_CHARS = 60;

/**
 * A part's `onRotate`: a hook name, under the name rule. Text that is not one (shell text, as
 * `onRotate` once was) is refused saying what to do instead.
 */
const HookName = z.string().regex(NAME_PATTERN, {
  error: (iss) => {
    const text = typeof iss.input === "string" ? iss.input : "";
    const quoted = JSON.stringify(text.length > QUOTED_CHARS ? `${text.slice(0, QUOTED_CHARS)}…` : text);
    return `${quoted} is not a hook name: name a hook the part's node allows (mesh-agent --allow-hook NAME=COMMAND, or meshctl up --allow-hook NAME=COMMAND); a hook name ${NAME_RULE}`;
  },
});

export const PartDoc = z.strictObject({
  name: Name,
  node: Name,
  installed: z.boolean().default(true),
  /**
   * The name of a hook that the part's node's agent allows (`mesh-agent --allow-hook
   * NAME=COMMAND`): the agent runs that COMMAND after writing a rotated credential and before
   * confirming, e.g. a reload. Never a command itself: what runs on a node is the node's
   * operator's to say, not a manifest's.
   */
  onRotate: HookName.optional(),
});
export type PartDoc = z.infer<typeof PartDoc>;

export const RequirementDoc = z.strictObject({
  name: Name,
  kind: z.enum(KIND_LIST),
  /** Parts that need it; all parts of the module when left out. */
  parts: z.array(Name).min(1).max(Limits.requirementParts, atMost(Limits.requirementParts, "parts")).optional(),
  /** How often the verifier re-checks the grant: `{ every: 30s }`; default `MESH_VERIFY_INTERVAL` (10 s). */
  verify: VerifyPolicy.optional(),
  /** What the verifier does about drift: `auto` (default) repairs it, `report` only records it. */
  repair: RepairPolicy.optional(),
  /** How often the rotator rotates the grant: `{ every: 30d }`; never when left out. */
  rotate: RotatePolicy.optional(),
  /** Kind-specific settings (see the README's section on the kind). */
  options: RequirementOptions.optional(),
  /**
   * What happens to the resource once no installed part needs the grant: `Retain` (the default
   * of kinds that hold data) revokes its logins and keeps the data, `Delete` drops it. Kinds that
   * are a credential alone are always deleted.
   */
  deletionPolicy: z.enum(["Retain", "Delete"]).optional(),
});
export type RequirementDoc = z.infer<typeof RequirementDoc>;

export const ModuleDoc = z
  .strictObject({
    kind: z.literal("Module"),
    name: Name,
    parts: z.array(PartDoc).max(Limits.parts, atMost(Limits.parts, "parts")).default([]),
    requires: z.array(RequirementDoc).max(Limits.requirements, atMost(Limits.requirements, "requirements")).default([]),
    /**
     * The kinds the module's own parts may declare requirements of, when they re-declare the
     * module with their identity (`declare` in @mesh/client, on `mesh.api.apply.<module>`);
     * none when left out. Only the operator sets it: a part may change neither it nor `parts`.
     */
    allowKinds: z.array(z.enum(KIND_LIST)).max(Limits.serves, atMost(Limits.serves, "kinds")).optional(),
  })
  .superRefine((m, ctx) => {
    const partNames = new Set<string>();
    m.parts.forEach((p, i) => {
      if (partNames.has(p.name)) ctx.addIssue({ code: "custom", path: ["parts", i, "name"], message: `duplicate part ${p.name}` });
      partNames.add(p.name);
    });
    const reqNames = new Set<string>();
    m.requires.forEach((r, i) => {
      if (reqNames.has(r.name)) ctx.addIssue({ code: "custom", path: ["requires", i, "name"], message: `duplicate requirement ${r.name}` });
      reqNames.add(r.name);
      if (isReservedRequirementName(r.name)) {
        ctx.addIssue({ code: "custom", path: ["requires", i, "name"], message: `${r.name} is reserved: the mesh gives every part its identity itself (binding ${IDENTITY_BINDING}); name the requirement otherwise` });
      }
      if (r.kind === Kinds.MeshIdentity) {
        ctx.addIssue({ code: "custom", path: ["requires", i, "kind"], message: `${Kinds.MeshIdentity} is not declared: every installed part gets its identity from the mesh (binding ${IDENTITY_BINDING}); for application traffic declare a ${Kinds.NatsUser}` });
      }
      (r.parts ?? []).forEach((p, j) => {
        if (!partNames.has(p)) {
          ctx.addIssue({ code: "custom", path: ["requires", i, "parts", j], message: `names no part of module ${m.name}: ${p}` });
        }
      });
    });
    if (m.requires.length > 0 && m.parts.length === 0) {
      ctx.addIssue({ code: "custom", path: ["parts"], message: "a module with requirements needs at least one part to deliver them to" });
    }
  });
export type ModuleDoc = z.infer<typeof ModuleDoc>;

export const ManifestDoc = z.discriminatedUnion("kind", [ProviderDoc, ModuleDoc]);
export type ManifestDoc = z.infer<typeof ManifestDoc>;

/** One problem of a rejected file: which document, where in it, and what is wrong. */
export interface Problem {
  /** 0-based index of the document in its file (or request). */
  document: number;
  /** Path inside the document, like `requires[0].kind`; empty for the document itself. */
  path: string;
  message: string;
}

export type ParseResult = { ok: true; documents: ManifestDoc[] } | { ok: false; problems: Problem[] };

/** Formats a zod path as users write it: `requires[0].kind`. */
export function formatPath(path: readonly PropertyKey[]): string {
  let out = "";
  for (const p of path) {
    if (typeof p === "number") out += `[${p}]`;
    else out += out ? `.${String(p)}` : String(p);
  }
  return out;
}

function issueMessage(iss: z.core.$ZodIssue): string {
  if ((iss.code === "invalid_type" || iss.code === "invalid_value") && "input" in iss && iss.input === undefined) return "required";
  if (iss.code === "invalid_union" && (iss as { discriminator?: string }).discriminator === "kind") {
    return "kind must be Provider or Module";
  }
  if (iss.code === "unrecognized_keys") return `unknown field${iss.keys.length > 1 ? "s" : ""}: ${iss.keys.join(", ")}`;
  return iss.message;
}

/**
 * Validates documents already decoded from YAML or JSON. Every problem of every document is
 * listed; the result holds documents only when there is none. Two documents of the same kind
 * and name in one file are a problem too.
 */
export function validateDocuments(raw: readonly unknown[]): ParseResult {
  if (raw.length > Limits.documents) {
    return { ok: false, problems: [{ document: Limits.documents, path: "", message: `${raw.length} documents; at most ${Limits.documents} go in one file or one apply: split them` }] };
  }
  const problems: Problem[] = [];
  const documents: ManifestDoc[] = [];
  const seen = new Map<string, number>();
  raw.forEach((doc, index) => {
    // Duplicates are found on the raw identity, so they are reported even beside other problems.
    const { kind, name } = (typeof doc === "object" && doc !== null ? doc : {}) as { kind?: unknown; name?: unknown };
    if (typeof kind === "string" && typeof name === "string") {
      const id = `${kind}/${name}`;
      const first = seen.get(id);
      if (first !== undefined) problems.push({ document: index, path: "name", message: `${id} is also defined by document ${first}` });
      else seen.set(id, index);
    }
    const r = ManifestDoc.safeParse(doc, { reportInput: true });
    if (!r.success) {
      for (const iss of r.error.issues) problems.push({ document: index, path: formatPath(iss.path), message: issueMessage(iss) });
      return;
    }
    documents.push(r.data);
  });
  if (raw.length === 0) problems.push({ document: 0, path: "", message: "no documents" });
  return problems.length ? { ok: false, problems } : { ok: true, documents };
}

/** One line per problem, the way the CLI prints them. */
export function formatProblems(problems: readonly Problem[], source?: string): string {
  return problems
    .map((p) => `${source ? `${source}: ` : ""}document ${p.document}${p.path ? `: ${p.path}` : ""}: ${p.message}`)
    .join("\n");
}
