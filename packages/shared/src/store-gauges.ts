/**
 * The store's gauges (metrics.ts `observeStore`), worked out from what is in the store: grants
 * by kind, provider and condition; modules by state; holders still to confirm; the oldest
 * current generation of each kind; how long ago each node's agent reported. Pure: the verifier
 * that reports them (the one that owns them in its membership) feeds it what it reads.
 */
import type { GaugeValue, StoreGauges } from "./metrics.js";

/** What the gauges need of one grant, kept small: the verifier keeps one per grant. */
export interface GrantSummary {
  kind: string;
  provider: string | null;
  /** Each condition's type and status. */
  conditions: Array<{ type: string; status: string }>;
  /** When the current generation first reached a holder (ms), if it has. */
  deliveredAt?: number;
  /** A rotation of it is running (its `Rotating` condition is True). */
  rotating: boolean;
}

const str = (v: unknown): string | undefined => (typeof v === "string" ? v : undefined);

/** The summary of a grant record as stored (read leniently: a record of another version still counts), or undefined for one that is not a grant. */
export function summarizeGrant(record: unknown): GrantSummary | undefined {
  if (!record || typeof record !== "object") return undefined;
  const g = record as Record<string, unknown>;
  const kind = str(g.kind);
  if (!kind) return undefined;
  const conditions = (Array.isArray(g.conditions) ? g.conditions : [])
    .map((c: unknown) =>
      c && typeof c === "object" ? { type: str((c as Record<string, unknown>).type), status: str((c as Record<string, unknown>).status) } : {},
    )
    .filter((c): c is { type: string; status: string } => c.type !== undefined && c.status !== undefined);
  const generation = typeof g.generation === "number" ? g.generation : 0;
  let deliveredAt: number | undefined;
  if (generation > 0 && g.holders && typeof g.holders === "object") {
    for (const h of Object.values(g.holders as Record<string, { generation?: unknown; deliveredAt?: unknown }>)) {
      const at = h.generation === generation ? Date.parse(str(h.deliveredAt) ?? "") : NaN;
      if (!Number.isNaN(at) && (deliveredAt === undefined || at < deliveredAt)) deliveredAt = at;
    }
  }
  return {
    kind,
    provider: str(g.provider) ?? null,
    conditions,
    ...(deliveredAt !== undefined ? { deliveredAt } : {}),
    rotating: conditions.some((c) => c.type === "Rotating" && c.status === "True"),
  };
}

/** Counts of equal attribute sets, as gauge values. */
function counted(items: Iterable<Record<string, string>>): GaugeValue[] {
  const by = new Map<string, GaugeValue>();
  for (const attributes of items) {
    const k = JSON.stringify(attributes);
    const had = by.get(k);
    if (had) had.value++;
    else by.set(k, { value: 1, attributes });
  }
  return [...by.values()];
}

/** The gauges at `now` (ms) from the grants' summaries, the modules' states, the agents' records and the running rotations' pending holders. */
export function storeGauges(input: {
  grants: Iterable<GrantSummary>;
  modules: Iterable<{ state: string }>;
  nodes: Iterable<{ node: string; seenAt: string }>;
  /** Each running rotation's kind and how many of its holders have not confirmed. */
  pending: Iterable<{ kind: string; holders: number }>;
  now: number;
}): StoreGauges {
  const grants = [...input.grants];
  const grantRows = function* () {
    for (const g of grants) {
      const base = { "mesh.kind": g.kind, "mesh.provider": g.provider ?? "none" };
      // A grant with no condition yet is counted too, so that the sum per kind is every grant.
      if (g.conditions.length === 0) yield { ...base, "mesh.condition": "none", "mesh.status": "none" };
      for (const c of g.conditions) yield { ...base, "mesh.condition": c.type, "mesh.status": c.status };
    }
  };
  const oldest = new Map<string, number>();
  for (const g of grants) {
    if (g.deliveredAt === undefined) continue;
    const age = Math.max(0, (input.now - g.deliveredAt) / 1000);
    oldest.set(g.kind, Math.max(oldest.get(g.kind) ?? 0, age));
  }
  const pending = new Map<string, number>();
  for (const p of input.pending) pending.set(p.kind, (pending.get(p.kind) ?? 0) + p.holders);
  return {
    grants: counted(grantRows()),
    modules: counted([...input.modules].map((m) => ({ "mesh.state": m.state }))),
    holdersPending: [...pending].map(([kind, value]) => ({ value, attributes: { "mesh.kind": kind } })),
    credentialAge: [...oldest].map(([kind, value]) => ({ value, attributes: { "mesh.kind": kind } })),
    agentReportAge: [...input.nodes].flatMap((n) => {
      const at = Date.parse(n.seenAt);
      return Number.isNaN(at) ? [] : [{ value: Math.max(0, (input.now - at) / 1000), attributes: { "mesh.node": n.node } }];
    }),
  };
}
