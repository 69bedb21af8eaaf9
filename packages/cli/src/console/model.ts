/**
 * What the console's pages show, computed from a {@link ConsoleSnapshot} by pure functions:
 * the graph of modules → requirements → grants → providers with each one's state, tone and
 * reason; a grant's page; a rotation's fan-out. The words come from the readers the other
 * commands use (`explainModule`, `toStatusGrant`, `traceRotation`), so the console and the
 * terminal never disagree. No value here is secret: the snapshot holds none.
 */
import {
  BUILTIN_SECRET_PROVIDER,
  RotationStates,
  keys,
  parseGrantId,
  parseHolderId,
  type Condition,
  type Grant,
  type ProviderDoc,
  type RepairEvent,
  type Rotation,
  type Verification,
} from "@mesh/shared";
import { explainModuleAndIdentities, type RequirementState } from "../explain.js";
import { REQUIREMENT_WORDS, requirementTone } from "../explain-format.js";
import { rotationProgress, traceRotation, type TraceEvent } from "../rotation-view.js";
import { conditionTone, stateTone, type Tone } from "../status-format.js";
import { toStatusGrant, toStatusRotation, type StatusRotation, type StatusVerification } from "../status-report.js";
import { valuesOf, type ConsoleSnapshot } from "./snapshot.js";

/** The columns of the graph, left to right. */
export type GraphColumn = "module" | "requirement" | "grant" | "provider";

/** One box of the graph. */
export interface GraphNode {
  /** Unique: `module:shop`, `requirement:shop/db`, `grant:shop/db`, `provider:pg-main`. */
  id: string;
  column: GraphColumn;
  /** The name shown first (`shop`, `db`, `shop/db`, `pg-main`). */
  label: string;
  /** A word for where it stands (`Ready`, `Unsatisfiable`, `generation 2`, `installed`…). */
  state: string;
  tone: Tone;
  /** Why it is not satisfied, short (`ProviderUnreachable from node-b`); absent when it is. */
  reason?: string;
  /** The longer words: the module's message, explain's why, the condition's message. */
  detail?: string;
  /** Further facts, one per line (a provider's kinds, endpoint and needs). */
  lines: string[];
  /** The console page about it, when it has one (`/grant/shop/db`). */
  href?: string;
}

/** One arrow of the graph. */
export interface GraphEdge {
  from: string;
  to: string;
  /** `requires`, `granted as`, `served by`; `could be served by` (a provider not installed); `needs`. */
  label: "requires" | "granted as" | "served by" | "could be served by" | "needs";
}

/** The overview: every node and edge, and what the page says above them. */
export interface GraphModel {
  nodes: GraphNode[];
  edges: GraphEdge[];
  /** Counts for the heading: modules by state. */
  summary: Array<{ state: string; tone: Tone; count: number }>;
  /** Rotations that have not committed (running or Stalled), by id. */
  running: Array<StatusRotation & { tone: Tone; href: string }>;
}

/** The page of a grant. */
export const grantHref = (grantId: string) => `/grant/${grantId}`;
/** The page of a rotation (`shop/db#3` → `/rotation/shop/db/3`). */
export const rotationHref = (rotationId: string) => `/rotation/${rotationId.replace("#", "/")}`;

/** The least good of some tones. */
export function worstTone(tones: readonly Tone[]): Tone {
  return tones.includes("bad") ? "bad" : tones.includes("warn") ? "warn" : "ok";
}

/** Strips credentials from a URL (`postgres://u:p@h:5432/x` → `postgres://h:5432/x`); text that is no URL is shown as its scheme only. */
export function endpointShown(endpoint: string): string {
  try {
    const u = new URL(endpoint);
    u.username = "";
    u.password = "";
    u.search = "";
    u.hash = "";
    return u.toString().replace(/\/$/, "");
  } catch {
    return endpoint.split(":")[0] ?? "";
  }
}

/** Nodes from which a provider is reported unreachable, sorted. */
function unreachableNodes(snap: ConsoleSnapshot, provider: string): string[] {
  return valuesOf(snap, "reachability")
    .filter((r) => r.provider === provider && !r.reachable)
    .map((r) => r.node)
    .sort();
}

/** The first condition of a grant that is not ok, bad before waiting. */
function blockingCondition(conditions: readonly Condition[]): Condition | undefined {
  const toned = conditions.map((c) => ({ c, tone: conditionTone(c.status, c.reason) }));
  return toned.find((t) => t.tone === "bad")?.c ?? toned.find((t) => t.tone === "warn")?.c;
}

/** A short reason: the condition's reason, with the nodes it concerns for `ProviderUnreachable`. */
function shortReason(c: Condition, g: Grant, snap: ConsoleSnapshot): string {
  if (c.reason === "ProviderUnreachable" && g.provider) {
    const targetNodes = new Set(g.targets.map((t) => t.node));
    const from = unreachableNodes(snap, g.provider).filter((n) => targetNodes.has(n));
    if (from.length) return `ProviderUnreachable from ${from.join(", ")}`;
  }
  return c.reason;
}

function grantNode(g: Grant, snap: ConsoleSnapshot): GraphNode {
  const blocking = blockingCondition(g.conditions);
  const rotation = toStatusRotation(snap.rotations.get(keys.grant(g.module, g.requirement))?.value);
  const tone = worstTone([blocking ? conditionTone(blocking.status, blocking.reason) : "ok", rotation?.state === "Stalled" ? "bad" : "ok"]);
  const lines = [`${g.kind}`, `generation ${g.generation}`];
  if (rotation) lines.push(`rotating ${rotation.from}→${rotation.to}: ${rotation.state}, ${rotation.confirmed}/${rotation.total} confirmed`);
  return {
    id: `grant:${g.id}`,
    column: "grant",
    label: g.id,
    state: g.conditions.length === 0 ? "no condition yet" : blocking ? `${blocking.type} ${blocking.status}` : "satisfied",
    tone: g.conditions.length === 0 ? "warn" : tone,
    ...(blocking ? { reason: shortReason(blocking, g, snap), detail: blocking.message } : {}),
    lines,
    href: grantHref(g.id),
  };
}

function providerNode(p: ProviderDoc, snap: ConsoleSnapshot): GraphNode {
  const unreachable = unreachableNodes(snap, p.name);
  const needs = (p.needs ?? []).map((id) => {
    const ref = parseGrantId(id);
    const g = ref ? snap.grants.get(keys.grant(ref.module, ref.requirement))?.value : undefined;
    const provisioned = g !== undefined && g.generation > 0 && g.conditions.some((c) => c.type === "Provisioned" && c.status === "True");
    return { id, provisioned };
  });
  const unmet = needs.filter((n) => !n.provisioned).map((n) => n.id);
  const reason = !p.installed
    ? "ProviderNotInstalled"
    : unreachable.length
      ? `ProviderUnreachable from ${unreachable.join(", ")}`
      : unmet.length
        ? `AwaitingDependency: ${unmet.join(", ")}`
        : undefined;
  return {
    id: `provider:${p.name}`,
    column: "provider",
    label: p.name,
    state: p.installed ? "installed" : "not installed",
    tone: !p.installed ? "bad" : reason ? "warn" : "ok",
    ...(reason ? { reason } : {}),
    lines: [
      `serves ${p.serves.join(", ")}`,
      `node ${p.node}, ${endpointShown(p.endpoint)}`,
      ...(needs.length ? [`needs ${needs.map((n) => `${n.id} (${n.provisioned ? "provisioned" : "not provisioned"})`).join(", ")}`] : []),
    ],
  };
}

const builtinProvider = (): GraphNode => ({
  id: `provider:${BUILTIN_SECRET_PROVIDER}`,
  column: "provider",
  label: BUILTIN_SECRET_PROVIDER,
  state: "built in",
  tone: "ok",
  lines: ["serves secret", "the mesh generates the value itself"],
});

/**
 * The graph of the whole mesh: every processed module (and stored ones not processed yet), its
 * requirements as explain reads them, their grants, and the providers, with the edges between
 * them; the providers' `needs` are edges too. Sorted, so the same snapshot gives the same graph.
 */
export function graphModel(snap: ConsoleSnapshot, now = new Date()): GraphModel {
  const nodes: GraphNode[] = [];
  const edges: GraphEdge[] = [];
  const grants = valuesOf(snap, "grants");
  const providers = valuesOf(snap, "providers");
  const nodeRecords = valuesOf(snap, "nodes");
  const modules = valuesOf(snap, "modules");
  const processed = new Set(modules.map((m) => m.module));
  const usedProviders = new Set<string>();

  for (const status of modules) {
    const module = status.module;
    const manifest = snap.manifests.get(module);
    const own = grants.filter((g) => g.module === module);
    const explanation = explainModuleAndIdentities({
      status,
      grants: own,
      providers,
      nodes: nodeRecords,
      now,
      ...(manifest ? { manifest: { doc: manifest.value, revision: manifest.revision } } : {}),
    });
    nodes.push({
      id: `module:${module}`,
      column: "module",
      label: module,
      state: status.state,
      tone: stateTone(status.state),
      ...(status.message ? { detail: status.message } : {}),
      lines: [`${explanation.requirements.length} requirement${explanation.requirements.length === 1 ? "" : "s"}`],
    });
    for (const r of explanation.requirements) {
      const rid = `requirement:${r.grant}`;
      nodes.push({
        id: rid,
        column: "requirement",
        label: r.requirement,
        state: REQUIREMENT_WORDS[r.state as RequirementState],
        tone: requirementTone(r.state),
        detail: r.why + (r.next ? ` Next: ${r.next}` : ""),
        lines: [`${r.kind}, for ${r.parts.join(", ") || "no part"}`],
        href: grantHref(r.grant),
      });
      edges.push({ from: `module:${module}`, to: rid, label: "requires" });
      const g = own.find((x) => x.requirement === r.requirement);
      if (!g) continue;
      nodes.push(grantNode(g, snap));
      edges.push({ from: rid, to: `grant:${g.id}`, label: "granted as" });
      if (g.provider) {
        usedProviders.add(g.provider);
        edges.push({ from: `grant:${g.id}`, to: `provider:${g.provider}`, label: "served by" });
      } else {
        for (const p of providers.filter((p) => p.serves.includes(g.kind) && !p.installed)) {
          edges.push({ from: `grant:${g.id}`, to: `provider:${p.name}`, label: "could be served by" });
        }
      }
    }
  }
  for (const m of valuesOf(snap, "manifests")) {
    if (processed.has(m.name)) continue;
    nodes.push({
      id: `module:${m.name}`,
      column: "module",
      label: m.name,
      state: "not processed",
      tone: "warn",
      reason: "NotProcessed",
      detail: `a manifest of ${m.name} is stored, but the resolver has not processed it yet; if this lasts, the resolver is not running`,
      lines: [],
    });
  }
  for (const p of providers) nodes.push(providerNode(p, snap));
  if (usedProviders.has(BUILTIN_SECRET_PROVIDER) && !providers.some((p) => p.name === BUILTIN_SECRET_PROVIDER)) nodes.push(builtinProvider());
  const ids = new Set(nodes.map((n) => n.id));
  for (const p of providers) {
    for (const need of p.needs ?? []) {
      if (ids.has(`grant:${need}`)) edges.push({ from: `provider:${p.name}`, to: `grant:${need}`, label: "needs" });
    }
  }
  const counts = new Map<string, number>();
  for (const n of nodes) if (n.column === "module") counts.set(n.state, (counts.get(n.state) ?? 0) + 1);
  return {
    nodes,
    // An edge to a provider that is not registered (removed meanwhile) has nothing to point at.
    edges: edges.filter((e) => ids.has(e.from) && ids.has(e.to)),
    summary: [...counts.entries()].sort(([a], [b]) => a.localeCompare(b)).map(([state, count]) => ({ state, count, tone: stateTone(state) })),
    running: valuesOf(snap, "rotations")
      .map((r) => toStatusRotation(r))
      .filter((r) => r !== undefined)
      .map((r) => ({ ...r, tone: rotationTone(r.state), href: rotationHref(r.id) })),
  };
}

/** A check from one place, for the grant page. */
export interface CheckRow {
  /** `verifier` or the holder `<node>/<part>` whose agent probed. */
  from: string;
  ok: boolean;
  reason?: string;
  message: string;
  generation: number;
  observedAt: string;
  /** A probe older than three of its intervals: the agent has gone quiet. */
  stale: boolean;
}

/** One generation of a grant, for the grant page. */
export interface GenerationRow {
  generation: number;
  /** When the grant record first showed it (from the bucket's history), if still recorded. */
  since?: string;
  current: boolean;
  /** Holders on it now. */
  holders: string[];
}

/** The grant page. */
export interface GrantPage {
  id: string;
  module: string;
  requirement: string;
  kind: string;
  provider: string | null;
  generation: number;
  parts: string[];
  targets: Array<{ part: string; node: string }>;
  resource: Array<[string, string]>;
  tone: Tone;
  conditions: Array<Condition & { tone: Tone }>;
  holders: Array<{ holder: string; generation: number; deliveredAt: string; current: boolean }>;
  generations: GenerationRow[];
  checks: CheckRow[];
  lastCheck?: Pick<StatusVerification, "lastCheckedAt" | "lastCheckedFrom">;
  /** Newest first. */
  repairs: RepairEvent[];
  running?: StatusRotation;
  /** Every recorded rotation, newest first. */
  rotations: Array<{
    id: string;
    from: number;
    to: number;
    state: string;
    tone: Tone;
    trigger: string;
    requestedAt: string;
    committedAt?: string;
    confirmed: number;
    total: number;
    href: string;
  }>;
}

/** What names a rotation and where it stands, on the grant page's list and on its own page. */
function rotationHead(r: Rotation) {
  return {
    id: r.id,
    from: r.from,
    to: r.to,
    state: r.state,
    tone: rotationTone(r.state),
    trigger: r.trigger,
    requestedAt: r.requestedAt,
    ...(r.committedAt ? { committedAt: r.committedAt } : {}),
  };
}

/** The tone of a rotation state. */
export function rotationTone(state: string): Tone {
  return state === RotationStates.Committed ? "ok" : state === RotationStates.Stalled ? "bad" : "warn";
}

/**
 * The page of grant `g`: `history` is the grant record's revisions (oldest first) as the
 * bucket keeps them, `rotations` every recorded rotation of it (oldest first).
 */
export function grantPage(
  g: Grant,
  opts: { verification?: Verification; history?: ReadonlyArray<{ generation: number; at: string }>; rotations?: readonly Rotation[]; now?: Date } = {},
): GrantPage {
  const now = opts.now ?? new Date();
  const rotations = opts.rotations ?? [];
  const latest = rotations.at(-1);
  const sg = toStatusGrant(g, opts.verification, now, latest);
  const since = new Map<number, string>();
  for (const h of opts.history ?? []) if (!since.has(h.generation)) since.set(h.generation, h.at);
  for (const r of rotations) if (r.committedAt && !since.has(r.to)) since.set(r.to, r.committedAt);
  const generations = new Set<number>([...since.keys(), ...Object.values(g.holders).map((h) => h.generation)]);
  if (g.generation > 0) generations.add(g.generation);
  const v = opts.verification;
  const checks: CheckRow[] = v
    ? [
        { from: `verifier (${v.checkedBy})`, ...checkFields(v.verifier), stale: false },
        ...Object.entries(v.probes)
          .sort(([a], [b]) => a.localeCompare(b))
          .map(([holder, p]) => ({ from: holder, ...checkFields(p), stale: now.getTime() - Date.parse(p.observedAt) > 3 * p.intervalMs })),
      ]
    : [];
  const blocking = blockingCondition(g.conditions);
  return {
    id: g.id,
    module: g.module,
    requirement: g.requirement,
    kind: g.kind,
    provider: g.provider,
    generation: g.generation,
    parts: g.parts,
    targets: g.targets,
    resource: Object.entries(g.resource).sort(([a], [b]) => a.localeCompare(b)),
    tone: blocking ? conditionTone(blocking.status, blocking.reason) : "ok",
    conditions: g.conditions.map((c) => ({ ...c, tone: conditionTone(c.status, c.reason) })),
    holders: Object.entries(g.holders)
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([holder, h]) => ({ holder, generation: h.generation, deliveredAt: h.deliveredAt, current: h.generation === g.generation })),
    generations: [...generations]
      .filter((n) => n > 0)
      .sort((a, b) => b - a)
      .map((n) => ({
        generation: n,
        ...(since.has(n) ? { since: since.get(n)! } : {}),
        current: n === g.generation,
        holders: Object.entries(g.holders)
          .filter(([, h]) => h.generation === n)
          .map(([k]) => k)
          .sort(),
      })),
    checks,
    ...(sg.verification ? { lastCheck: { lastCheckedAt: sg.verification.lastCheckedAt, lastCheckedFrom: sg.verification.lastCheckedFrom } } : {}),
    repairs: [...(g.repairs ?? [])].reverse(),
    ...(sg.rotation ? { running: sg.rotation } : {}),
    rotations: [...rotations].reverse().map((r) => {
      const p = rotationProgress(r);
      return {
        ...rotationHead(r),
        confirmed: p.confirmed,
        total: p.total,
        href: rotationHref(r.id),
      };
    }),
  };
}

function checkFields(c: Verification["verifier"]) {
  return { ok: c.ok, ...(c.reason ? { reason: c.reason } : {}), message: c.message, generation: c.generation, observedAt: c.observedAt };
}

/** Where each time on a rotation's timeline comes from, in words the page shows beside it. */
export const TIME_SOURCES = {
  states: "the rotator's clock: when it entered each state (rotation record in mesh-rotations)",
  received: "the holder's clock, in rotations recorded before confirmations were JetStream acks: when it got the new generation",
  applied: "the holder's clock, in those older rotations: when it had written the files (or switched the application) and proved the new credential logs in",
  confirmed:
    "the NATS server's clock: when it recorded the holder's ack of the broadcast on the holder's own consumer (its ack metric; for one a restarted rotator found in the consumer's ack floor, when it found it)",
} as const;

/** One holder's row of the fan-out. */
export interface TimelineRow {
  holder: string;
  /** `agent` for `<node>/<part>`, `sdk` for `<node>/<part>/<instance>`. */
  via: "agent" | "sdk";
  received: TraceEvent | null;
  applied: TraceEvent | null;
  confirmed: TraceEvent | null;
  /** `confirmed`, `waiting`, or `stalled` (the rotation is Stalled and this holder has not confirmed). */
  status: "confirmed" | "waiting" | "stalled";
  tone: Tone;
}

/** A rotation's page: its states and one row per holder, offsets scaled to `spanMs`. */
export interface RotationTimeline {
  id: string;
  grant: string;
  from: number;
  to: number;
  state: string;
  tone: Tone;
  trigger: string;
  requestedAt: string;
  deadline: string;
  committedAt?: string;
  traceparent?: string;
  states: Array<{ state: string } & TraceEvent>;
  rows: TimelineRow[];
  confirmed: number;
  total: number;
  missing: string[];
  /** The largest offset on the page (at least 1 ms): bars are drawn as a share of it. */
  spanMs: number;
  /** The outcome in one sentence. */
  outcome: string;
}

/** The fan-out of rotation `r`, one row per holder, from `traceRotation`. */
export function rotationTimeline(r: Rotation): RotationTimeline {
  const t = traceRotation(r);
  const stalled = r.state === RotationStates.Stalled;
  const rows: TimelineRow[] = t.holders.map((h) => {
    const status = h.confirmed ? "confirmed" : stalled ? "stalled" : "waiting";
    return {
      holder: h.holder,
      via: parseHolderId(h.holder)?.instance === undefined ? "agent" : "sdk",
      received: h.received,
      applied: h.applied,
      confirmed: h.confirmed,
      status,
      tone: status === "confirmed" ? "ok" : status === "stalled" ? "bad" : "warn",
    };
  });
  const offsets = [
    ...t.states.map((s) => s.offsetMs),
    ...rows.flatMap((x) => [x.received, x.applied, x.confirmed].filter((e) => e !== null).map((e) => e.offsetMs)),
  ];
  const p = { confirmed: rows.filter((x) => x.confirmed).length, total: rows.length };
  const outcome =
    r.state === RotationStates.Committed
      ? `Committed: every holder (${p.confirmed}/${p.total}) confirmed generation ${r.to}; generation ${r.from} is retired`
      : stalled
        ? `Stalled: ${t.missing.length} of ${p.total} holders have not confirmed generation ${r.to} since the deadline; generation ${r.from} keeps working, and the rotation commits by itself when they confirm`
        : `${r.state}: ${p.confirmed}/${p.total} holders confirmed generation ${r.to}`;
  return {
    ...rotationHead(r),
    grant: r.grant,
    deadline: r.deadline,
    ...(r.traceparent ? { traceparent: r.traceparent } : {}),
    states: t.states,
    rows,
    ...p,
    missing: t.missing,
    spanMs: Math.max(1, ...offsets),
    outcome,
  };
}
