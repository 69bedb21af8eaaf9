/**
 * The audit trail: who asked what of the mesh, when, and what came of it. Every request that
 * changes or reads a credential or a declaration is recorded in stream `MESH_AUDIT` before it is
 * answered (serve-json.ts): a change once before it is worked on and once with its outcome, a
 * read once with its outcome before the values go out. A request that cannot be recorded is
 * refused, never served unrecorded.
 *
 * Who asked is read from the subject the server let the request through on, never from its
 * body ({@link requesterOf}): an operator with a name sends on `<request subject>.op.<name>`,
 * which only that operator's identity may publish to; the bootstrap admin (the break-glass
 * identity, which may publish anywhere) sends on the bare subject; a part sends on subjects that
 * name its module, node and part. No value is recorded, nor a hash of one: a credential is named
 * by its grant and generation, which says which value it was to whoever may read the store.
 *
 * Pure; the writer is audit-log.ts.
 */
import { z } from "zod";
import { CONTROL_PLANE_MODULE, isValidName } from "./names.js";
import { InboxRoots } from "./inboxes.js";
import { subjects } from "./subjects.js";

/** The token between a request subject and an operator's name: `mesh.api.rotate.op.alice`. */
export const OPERATOR_TOKEN = "op";

/** The requirement of module `mesh` whose `nats.user` identity is operator `name` (`meshctl admin add`). */
export function operatorRequirement(name: string): string {
  return `operator-${name}`;
}

/** The name of the operator whose identity's requirement is `requirement`, or undefined when it is not an operator's. */
export function operatorOfRequirement(requirement: string): string | undefined {
  const m = /^operator-(.+)$/.exec(requirement);
  return m && isValidName(m[1]!) ? m[1] : undefined;
}

/** The operator whose identity takes its replies under `inboxPrefix` (`_GRANT_INBOX.mesh.operator-<name>`), or undefined. */
export function operatorOfInboxPrefix(inboxPrefix: string | undefined): string | undefined {
  const prefix = `${InboxRoots.grant}.${CONTROL_PLANE_MODULE}.`;
  return inboxPrefix?.startsWith(prefix) ? operatorOfRequirement(inboxPrefix.slice(prefix.length)) : undefined;
}

/** Operator names: a name (names.ts) short enough that `operator-<name>` is one too. */
export function checkOperatorName(name: string): string | undefined {
  if (!isValidName(name) || !isValidName(operatorRequirement(name)))
    return `operator name ${JSON.stringify(name)} is refused: lower-case letters, digits and -, starting with a letter, at most ${63 - "operator-".length} characters`;
  return undefined;
}

/** Who asked: the identity the request's subject names. */
export type Requester =
  /** The bootstrap admin on a bare operator subject: the break-glass identity. */
  | { kind: "admin" }
  | { kind: "operator"; name: string }
  /** A part (or its node's agent, which may fetch for the parts of its node). */
  | { kind: "part"; module: string; node: string; part: string };

/** How a requester reads in the trail: `admin (break-glass)`, `operator:alice`, `part:shop/api@node-a`. */
export function requesterName(r: Requester): string {
  switch (r.kind) {
    case "admin":
      return "admin (break-glass)";
    case "operator":
      return `operator:${r.name}`;
    case "part":
      return `part:${r.module}/${r.part}@${r.node}`;
  }
}

/** The subject operator `name` sends request `subject` on (`mesh.api.rotate` → `mesh.api.rotate.op.<name>`). */
export function operatorSubject(subject: string, name: string): string {
  if (!isValidName(name)) throw new Error(`invalid operator name in subject: ${JSON.stringify(name)}`);
  return `${subject}.${OPERATOR_TOKEN}.${name}`;
}

/** Every named operator's form of request `subject` (what the service serving it subscribes to as well). */
export function operatorSubjectsOf(subject: string): string {
  return `${subject}.${OPERATOR_TOKEN}.*`;
}

/**
 * The subjects operator request `subject` is served on: bare (the bootstrap admin's) and as every
 * named operator sends it. The services subscribe to these and their identities are allowed them
 * (control-plane.ts), from this one place.
 */
export function operatorRequestSubjects(subject: string): [string, string] {
  return [subject, operatorSubjectsOf(subject)];
}

/**
 * Who sent a request on `subject`: a part's subject names that part (or its node's agent, for a
 * fetch); `<subject>.op.<name>` that operator; a bare operator subject the admin.
 */
export function requesterOf(subject: string): Requester {
  const fetch = /^mesh\.api\.credential\.fetch\.([^.]+)\.[^.]+\.([^.]+)\.([^.]+)$/.exec(subject);
  if (fetch) return { kind: "part", module: fetch[1]!, node: fetch[2]!, part: fetch[3]! };
  const part = /^mesh\.api\.(?:apply|credential\.list)\.([^.]+)\.([^.]+)\.([^.]+)$/.exec(subject);
  if (part) return { kind: "part", module: part[1]!, node: part[2]!, part: part[3]! };
  // A part's subjects are matched first: a node or module may be called `op` too.
  const t = subject.split(".");
  if (t.length >= 2 && t[t.length - 2] === OPERATOR_TOKEN && isValidName(t[t.length - 1]!)) return { kind: "operator", name: t[t.length - 1]! };
  return { kind: "admin" };
}

/**
 * Where `meshctl console` records its sessions: `mesh.audit.console` for the bootstrap admin,
 * `mesh.audit.console.op.<name>` for a named operator, whose identity may publish there and on
 * no other audit subject. A reader takes who opened the session from that subject.
 */
export function consoleAuditSubject(operator: string | undefined): string {
  const s = subjects.audit("console");
  return operator ? operatorSubject(s, operator) : s;
}

/** True for a subject {@link consoleAuditSubject} makes: its record's `who` is the subject's, not the body's. */
export function isConsoleAuditSubject(subject: string): boolean {
  const s = subjects.audit("console");
  return subject === s || subject.startsWith(`${s}.${OPERATOR_TOKEN}.`);
}

/** What a request did to its target, as the trail records it: names and numbers, never a value. */
export type AuditTarget = Record<string, string | number | boolean | string[] | undefined>;

/** One record of the trail. */
export const AuditRecord = z.object({
  /** The request's id: a change's two records share it. */
  id: z.string(),
  /** `request`: recorded before a change is worked on; `outcome`: what came of it (a read has only this one). */
  phase: z.enum(["request", "outcome"]),
  at: z.string(),
  /** {@link requesterName} of who asked. */
  who: z.string(),
  /** The action: `apply`, `delete`, `rotate`, `revoke`, `evict`, `verify`, `repair`, `fetch`, `list`, `declare`. */
  action: z.string(),
  /** The grant it concerns (`<module>/<requirement>`), when it concerns one. */
  grant: z.string().optional(),
  /** What else names its target (modules, generation, node, part). */
  target: z.record(z.string(), z.union([z.string(), z.number(), z.boolean(), z.array(z.string())])).optional(),
  /** The service instance that served it and the host it runs on. */
  service: z.string(),
  node: z.string(),
  /** `ok`, or the error code the request was refused with; absent on a `request` record. */
  outcome: z.string().optional(),
  /** What the refusal said (no value is ever in a message). */
  message: z.string().max(1_024).optional(),
});
export type AuditRecord = z.infer<typeof AuditRecord>;

/** What serve-json.ts asks of an endpoint it records: the action and target of one request's body and subject. */
export interface AuditedRequest {
  /** True for a request that changes something: recorded before it is worked on too. */
  change: boolean;
  describe(body: unknown, subject: string): { action: string; grant?: string; target?: AuditTarget };
}

/** A string of a request body as the trail keeps it: at most 128 characters (bodies are the sender's). */
const short = (v: unknown): string | undefined => (typeof v === "string" ? v.slice(0, 128) : undefined);
const field = (body: unknown, key: string): unknown => (body && typeof body === "object" ? (body as Record<string, unknown>)[key] : undefined);
/** `<kind>/<name>` of each document a body lists, at most 256. */
const documentNames = (body: unknown): string[] => {
  const docs = field(body, "documents");
  return Array.isArray(docs) ? docs.slice(0, 256).map((d) => `${short(field(d, "kind")) ?? "?"}/${short(field(d, "name")) ?? "?"}`) : [];
};

/** What the trail records of each request the services serve: names, never a value. */
export const AuditedRequests: Readonly<Record<"apply" | "declare" | "delete" | "rotate" | "evict" | "verify" | "fetch" | "list", AuditedRequest>> = {
  apply: {
    change: true,
    describe: (body) => ({ action: "apply", target: { documents: documentNames(body), force: field(body, "force") === true || undefined } }),
  },
  /** A part declaring its own module again (`mesh.api.apply.<module>.<node>.<part>`). */
  declare: { change: true, describe: (body) => ({ action: "declare", target: { documents: documentNames(body) } }) },
  delete: {
    change: true,
    describe: (body) => {
      const retained = field(body, "retained");
      return {
        action: "delete",
        target: {
          documents: documentNames(body),
          retained: Array.isArray(retained) ? retained.slice(0, 256).map((r) => short(r) ?? "?") : undefined,
          force: field(body, "force") === true || undefined,
        },
      };
    },
  },
  rotate: {
    change: true,
    describe: (body) => {
      const revoke = field(body, "revoke");
      return {
        action: revoke ? "revoke" : "rotate",
        grant: short(field(body, "grant")),
        target: {
          trigger: short(field(body, "trigger")),
          reason: short(field(revoke, "reason")),
          graceMs: typeof field(revoke, "graceMs") === "number" ? (field(revoke, "graceMs") as number) : undefined,
        },
      };
    },
  },
  evict: {
    change: true,
    describe: (body) => {
      const holders = field(body, "holders");
      return {
        action: "evict",
        grant: short(field(body, "grant")),
        target: { holders: Array.isArray(holders) ? holders.slice(0, 64).map((h) => short(h) ?? "?") : undefined },
      };
    },
  },
  verify: { change: true, describe: (body) => ({ action: field(body, "repair") === true ? "repair" : "verify", grant: short(field(body, "grant")) }) },
  fetch: {
    change: false,
    describe: (body) => ({
      action: "fetch",
      grant: short(field(body, "grant")),
      target: {
        generation: typeof field(body, "generation") === "number" ? (field(body, "generation") as number) : undefined,
        partKey: field(body, "partKey") === true || undefined,
      },
    }),
  },
  list: { change: false, describe: () => ({ action: "list" }) },
};
