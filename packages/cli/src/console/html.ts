/**
 * The console's pages as HTML, from the view models of model.ts. Every name and state
 * is text in the document (the graph is SVG with `<text>`, and the same facts are in tables
 * beside it), so a test, a screen reader or a search finds them. Every value is escaped. Pure.
 */
import type { TraceEvent } from "../rotation-view.js";
import { LINE_HEIGHT, layoutGraph, nodeLines, type GraphLayout } from "./layout.js";
import { TIME_SOURCES, grantHref, rotationHref, type GraphModel, type GrantPage, type RotationTimeline } from "./model.js";

/** Escapes text for HTML content and attribute values. */
export function esc(text: string | number): string {
  return String(text).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]!);
}

/** Turns a console path into the link to it (adds the access token). */
export type Linker = (path: string) => string;

/** A view: its title and the contents of `<main>`. */
export interface View {
  title: string;
  html: string;
}

const tone = (t: string) => `tone-${t}`;

/** Cuts text to `max` characters for a box of the graph (the tables beside it have it whole). */
function clip(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

function time(iso: string | undefined): string {
  if (!iso) return "-";
  return `<time datetime="${esc(iso)}">${esc(iso.replace("T", " "))}</time>`;
}

function svgGraph(l: GraphLayout, link: Linker): string {
  if (l.nodes.length === 0) return "";
  const edges = l.edges
    .map((e) => {
      const d = e.points.map((p, i) => `${i ? "L" : "M"}${p.x.toFixed(1)},${p.y.toFixed(1)}`).join(" ");
      return `<path class="edge edge-${esc(e.label.replace(/ /g, "-"))}" d="${d}" marker-end="url(#arrow)"><title>${esc(`${e.from} ${e.label} ${e.to}`)}</title></path>`;
    })
    .join("");
  const nodes = l.nodes
    .map((n) => {
      const x = n.x - n.width / 2;
      const y = n.y - n.height / 2;
      const texts = [
        { cls: "label", text: n.label },
        { cls: "state", text: n.state },
        ...(n.reason ? [{ cls: "reason", text: n.reason }] : []),
        ...n.lines.map((text) => ({ cls: "line", text })),
      ];
      const body = texts
        .map((t, i) => `<text class="${t.cls}" x="${(x + 10).toFixed(1)}" y="${(y + 10 + LINE_HEIGHT * (i + 0.8)).toFixed(1)}">${esc(clip(t.text, 34))}</text>`)
        .join("");
      const box = `<rect x="${x.toFixed(1)}" y="${y.toFixed(1)}" width="${n.width}" height="${n.height}" rx="6"/>`;
      const title = `<title>${esc([n.label, n.state, n.reason, n.detail, ...n.lines].filter(Boolean).join("\n"))}</title>`;
      const g = `<g class="node ${n.column} ${tone(n.tone)}" data-node="${esc(n.id)}" data-state="${esc(n.state)}" data-lines="${nodeLines(n)}">${title}${box}${body}</g>`;
      return n.href ? `<a href="${esc(link(n.href))}">${g}</a>` : g;
    })
    .join("");
  return (
    `<svg class="graph" role="img" aria-label="graph of modules, requirements, grants and providers" viewBox="0 0 ${Math.ceil(l.width)} ${Math.ceil(l.height)}" width="${Math.ceil(l.width)}" height="${Math.ceil(l.height)}">` +
    `<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z"/></marker></defs>` +
    edges +
    nodes +
    "</svg>"
  );
}

function badge(text: string, t: string): string {
  return `<span class="badge ${tone(t)}">${esc(text)}</span>`;
}

/** The overview: the graph, then the same facts as tables. */
export function renderOverview(model: GraphModel, link: Linker): View {
  const layout = layoutGraph(model);
  const byId = new Map(model.nodes.map((n) => [n.id, n]));
  const summary = model.summary.map((s) => `${badge(s.state, s.tone)} ${s.count}`).join(" ");
  const modules = model.nodes.filter((n) => n.column === "module");
  const rows = modules
    .map((m) => {
      const reqs = model.edges.filter((e) => e.from === m.id && e.label === "requires").map((e) => byId.get(e.to)!);
      const reqRows = reqs
        .map((r) => {
          const grantId = r.id.slice("requirement:".length);
          const g = byId.get(`grant:${grantId}`);
          const provider = model.edges.find((e) => e.from === `grant:${grantId}` && e.label === "served by")?.to.slice("provider:".length);
          return (
            `<tr class="requirement ${tone(r.tone)}" data-grant="${esc(grantId)}" data-tone="${esc(r.tone)}">` +
            `<td>${esc(r.label)}</td><td>${esc(r.lines[0] ?? "")}</td><td class="state">${badge(r.state, r.tone)}</td>` +
            `<td class="reason">${esc(g?.reason ?? r.reason ?? "")}</td>` +
            `<td><a href="${esc(link(grantHref(grantId)))}">${esc(grantId)}</a>${g ? ` ${badge(g.state, g.tone)}` : ""}${g?.lines[2] ? ` <span class="rotating">${esc(g.lines[2])}</span>` : ""}</td>` +
            `<td>${esc(provider ?? "none")}</td><td class="detail">${esc(r.detail ?? "")}</td></tr>`
          );
        })
        .join("");
      return (
        `<tbody class="module" data-module="${esc(m.label)}" data-state="${esc(m.state)}">` +
        `<tr class="module-row ${tone(m.tone)}"><th colspan="2">${esc(m.label)}</th><td class="state">${badge(m.state, m.tone)}</td><td colspan="4" class="detail">${esc(m.detail ?? "")}</td></tr>` +
        reqRows +
        "</tbody>"
      );
    })
    .join("");
  const providers = model.nodes
    .filter((n) => n.column === "provider")
    .map(
      (p) =>
        `<tr class="provider ${tone(p.tone)}" data-provider="${esc(p.label)}" data-state="${esc(p.state)}"><th>${esc(p.label)}</th><td class="state">${badge(p.state, p.tone)}</td>` +
        `<td class="reason">${esc(p.reason ?? "")}</td><td>${p.lines.map(esc).join("<br>")}</td></tr>`,
    )
    .join("");
  const html =
    `<h1>Mesh</h1><p class="summary">${summary || "no module has been applied yet: apply one with <code>meshctl apply -f FILE</code>"}</p>` +
    `<figure class="graph-box">${svgGraph(layout, link)}<figcaption>modules → requirements → grants → providers; dashed: a provider's needs, or one that could serve but is not installed. Click a requirement or grant for its page.</figcaption></figure>` +
    `<h2>Modules</h2><table class="modules"><thead><tr><th>requirement</th><th>kind, parts</th><th>state</th><th>reason</th><th>grant</th><th>provider</th><th>why</th></tr></thead>${rows}</table>` +
    `<h2>Rotations running</h2>${
      model.running.length
        ? `<ul class="running">${model.running.map((r) => `<li data-rotation="${esc(r.id)}"><a href="${esc(link(r.href))}">${esc(r.id)}</a> ${badge(r.state, r.tone)} ${r.from} → ${r.to}, ${r.confirmed}/${r.total} confirmed${r.missing.length ? `; waiting for ${esc(r.missing.slice(0, 10).join(", "))}${r.missing.length > 10 ? ` and ${r.missing.length - 10} more` : ""}` : ""}</li>`).join("")}</ul>`
        : `<p class="none">none</p>`
    }` +
    `<h2>Providers</h2><table class="providers"><thead><tr><th>provider</th><th>state</th><th>reason</th><th>serves, node, endpoint, needs</th></tr></thead><tbody>${providers}</tbody></table>`;
  return { title: `mesh console: ${modules.length} module${modules.length === 1 ? "" : "s"}`, html };
}

/** A grant's page. */
export function renderGrant(p: GrantPage, link: Linker): View {
  const conditions = p.conditions
    .map(
      (c) =>
        `<tr class="condition ${tone(c.tone)}" data-type="${esc(c.type)}"><th>${esc(c.type)}</th><td>${badge(c.status, c.tone)}</td><td class="reason">${esc(c.reason)}</td><td>${esc(c.message)}</td><td>${time(c.observedAt)}</td></tr>`,
    )
    .join("");
  const generations = p.generations
    .map(
      (g) =>
        `<tr data-generation="${g.generation}"><th>${g.generation}${g.current ? " (current)" : ""}</th><td>${time(g.since)}</td><td>${esc(g.holders.join(", ") || "-")}</td></tr>`,
    )
    .join("");
  const holders = p.holders
    .map(
      (h) =>
        `<tr data-holder="${esc(h.holder)}"><th>${esc(h.holder)}</th><td>${h.generation}${h.current ? "" : " (behind)"}</td><td>${time(h.deliveredAt)}</td></tr>`,
    )
    .join("");
  const checks = p.checks
    .map(
      (c) =>
        `<tr class="check ${tone(c.ok ? "ok" : "bad")}" data-from="${esc(c.from)}"><th>${esc(c.from)}</th><td>${badge(c.ok ? "ok" : (c.reason ?? "failed"), c.ok ? "ok" : "bad")}${c.stale ? ` ${badge("stale", "warn")}` : ""}</td><td>${c.generation}</td><td>${esc(c.message)}</td><td>${time(c.observedAt)}</td></tr>`,
    )
    .join("");
  const repairs = p.repairs
    .map(
      (r) =>
        `<li>${time(r.at)} ${badge(r.outcome, r.outcome === "repaired" ? "ok" : "bad")} ${esc(`${r.action} of generation ${r.generation} (${r.reason}) by ${r.by}${r.requested ? ", on request" : ""}: ${r.message}`)}</li>`,
    )
    .join("");
  const rotations = p.rotations
    .map(
      (r) =>
        `<tr data-rotation="${esc(r.id)}"><th><a href="${esc(link(r.href))}">${esc(r.id)}</a></th><td>${r.from} → ${r.to}</td><td>${badge(r.state, r.tone)}</td><td>${r.confirmed}/${r.total}</td><td>${esc(r.trigger)}</td><td>${time(r.requestedAt)}</td><td>${time(r.committedAt)}</td></tr>`,
    )
    .join("");
  const none = (what: string) => `<p class="none">${esc(what)}</p>`;
  const html =
    `<p><a href="${esc(link("/"))}">← mesh</a></p>` +
    `<h1>grant ${esc(p.id)} ${badge(p.tone === "ok" ? "satisfied" : "not satisfied", p.tone)}</h1>` +
    `<dl class="facts"><dt>kind</dt><dd>${esc(p.kind)}</dd><dt>provider</dt><dd>${esc(p.provider ?? "none")}</dd><dt>generation</dt><dd>${p.generation}</dd>` +
    `<dt>parts</dt><dd>${esc(p.parts.join(", ") || "-")}</dd><dt>delivered to</dt><dd>${esc(p.targets.map((t) => `${t.part} on ${t.node}`).join(", ") || "no installed part")}</dd>` +
    `<dt>resource</dt><dd>${esc(p.resource.map(([k, v]) => `${k} ${v}`).join(", ") || "-")}</dd></dl>` +
    (p.running
      ? `<p class="running ${tone(p.running.state === "Stalled" ? "bad" : "warn")}">rotating ${p.running.from} → ${p.running.to}: ${esc(p.running.state)}, ${p.running.confirmed}/${p.running.total} confirmed: <a href="${esc(link(rotationHref(p.running.id)))}">${esc(p.running.id)}</a></p>`
      : "") +
    `<h2>Conditions</h2>${conditions ? `<table class="conditions"><thead><tr><th>type</th><th>status</th><th>reason</th><th>message</th><th>observed</th></tr></thead><tbody>${conditions}</tbody></table>` : none("no condition yet")}` +
    `<h2>Generations</h2>${generations ? `<table class="generations"><thead><tr><th>generation</th><th>since (grant record's history)</th><th>holders on it</th></tr></thead><tbody>${generations}</tbody></table>` : none("not provisioned yet")}` +
    `<h2>Holders</h2>${holders ? `<table class="holders"><thead><tr><th>holder</th><th>generation</th><th>delivered</th></tr></thead><tbody>${holders}</tbody></table>` : none("no holder has been delivered this grant")}` +
    `<h2>Verification</h2>${p.lastCheck ? `<p>last checked ${time(p.lastCheck.lastCheckedAt)} from ${esc(p.lastCheck.lastCheckedFrom)}</p>` : ""}${checks ? `<table class="checks"><thead><tr><th>from</th><th>result</th><th>generation</th><th>message</th><th>observed</th></tr></thead><tbody>${checks}</tbody></table>` : none("the verifier has not checked it yet")}` +
    `<h2>Repairs</h2>${repairs ? `<ol class="repairs">${repairs}</ol>` : none("no repair")}` +
    `<h2>Rotations</h2>${rotations ? `<table class="rotations"><thead><tr><th>rotation</th><th>generations</th><th>state</th><th>confirmed</th><th>trigger</th><th>requested</th><th>committed</th></tr></thead><tbody>${rotations}</tbody></table>` : none("never rotated")}`;
  return { title: `grant ${p.id}`, html };
}

function offsetCell(e: TraceEvent | null, cls: string): string {
  return e ? `<td class="${cls}">+${(e.offsetMs / 1000).toFixed(3)} s<br><small>${time(e.at)}</small></td>` : `<td class="${cls} missing">-</td>`;
}

/** A bar per holder: a dot for received and applied, a bar from the start to its confirmation. */
function timelineBar(t: RotationTimeline, row: RotationTimeline["rows"][number]): string {
  const at = (e: TraceEvent | null) => (e ? (1000 * e.offsetMs) / t.spanMs : undefined);
  const [r, a, c] = [at(row.received), at(row.applied), at(row.confirmed)];
  const end = c ?? 1000;
  return (
    `<svg class="bar" viewBox="0 0 1000 14" preserveAspectRatio="none" aria-hidden="true">` +
    `<rect class="track" x="0" y="5" width="1000" height="4"/>` +
    `<rect class="span ${tone(row.tone)}" x="0" y="4" width="${end.toFixed(1)}" height="6"/>` +
    (r !== undefined ? `<rect class="mark received" x="${Math.max(0, r - 4).toFixed(1)}" y="1" width="8" height="12"/>` : "") +
    (a !== undefined ? `<rect class="mark applied" x="${Math.max(0, a - 4).toFixed(1)}" y="1" width="8" height="12"/>` : "") +
    (c !== undefined ? `<rect class="mark confirmed" x="${Math.max(0, c - 4).toFixed(1)}" y="1" width="8" height="12"/>` : "") +
    "</svg>"
  );
}

/** A rotation's page: the outcome, where its times come from, its states, one row per holder. */
export function renderRotation(t: RotationTimeline, link: Linker): View {
  const states = t.states
    .map((s) => `<tr data-state="${esc(s.state)}"><th>${esc(s.state)}</th><td>+${(s.offsetMs / 1000).toFixed(3)} s</td><td>${time(s.at)}</td></tr>`)
    .join("");
  const rows = t.rows
    .map(
      (r) =>
        `<tr class="holder ${tone(r.tone)}" data-holder="${esc(r.holder)}" data-status="${esc(r.status)}"><th>${esc(r.holder)}<br><small>${r.via === "agent" ? "node agent" : "SDK instance"}</small></th>` +
        offsetCell(r.received, "received") +
        offsetCell(r.applied, "applied") +
        offsetCell(r.confirmed, "confirmed") +
        `<td class="status">${badge(r.status === "stalled" ? "Stalled: not confirmed" : r.status, r.tone)}</td><td class="bar-cell">${timelineBar(t, r)}</td></tr>`,
    )
    .join("");
  const html =
    `<p><a href="${esc(link("/"))}">← mesh</a> · <a href="${esc(link(grantHref(t.grant)))}">grant ${esc(t.grant)}</a></p>` +
    `<h1>rotation ${esc(t.id)} <span class="rotation-state" data-state="${esc(t.state)}">${badge(t.state, t.tone)}</span></h1>` +
    `<p class="outcome ${tone(t.tone)}">${esc(t.outcome)}</p>` +
    `<dl class="facts"><dt>generations</dt><dd>${t.from} → ${t.to}</dd><dt>trigger</dt><dd>${esc(t.trigger)}</dd><dt>requested</dt><dd>${time(t.requestedAt)}</dd>` +
    `<dt>deadline</dt><dd>${time(t.deadline)}</dd><dt>committed</dt><dd>${time(t.committedAt)}</dd><dt>confirmed</dt><dd>${t.confirmed}/${t.total}</dd>` +
    (t.traceparent
      ? `<dt>trace</dt><dd><code>${esc(t.traceparent)}</code> (W3C traceparent of the rotator's span; every holder's span is its child)</dd>`
      : "") +
    `</dl>` +
    `<h2>Where the times come from</h2><dl class="sources"><dt>rotation states</dt><dd>${esc(TIME_SOURCES.states)}</dd><dt>broadcast reached</dt><dd>${esc(TIME_SOURCES.received)}</dd>` +
    `<dt>applied</dt><dd>${esc(TIME_SOURCES.applied)}</dd><dt>confirmed</dt><dd>${esc(TIME_SOURCES.confirmed)}</dd></dl>` +
    `<p class="note">Offsets are from the request (${time(t.requestedAt)}, the rotator's clock); a holder's clock may differ from the rotator's by their skew.</p>` +
    `<h2>States</h2><table class="states"><tbody>${states}</tbody></table>` +
    `<h2>Fan-out</h2>${rows ? `<table class="timeline"><thead><tr><th>holder</th><th>broadcast reached</th><th>applied</th><th>confirmed</th><th>status</th><th>timeline</th></tr></thead><tbody>${rows}</tbody></table>` : `<p class="none">no holder had to confirm (none held the grant when the rotation started)</p>`}`;
  return { title: `rotation ${t.id}: ${t.state}`, html };
}

/** A page for what is not there (an unknown grant or rotation), saying what to do. */
export function renderMissing(what: string, hint: string, link: Linker): View {
  return { title: what, html: `<p><a href="${esc(link("/"))}">← mesh</a></p><h1>${esc(what)}</h1><p>${esc(hint)}</p>` };
}

/** The whole document of a view; the script opens the live channel once the page is shown. */
export function renderDocument(view: View, opts: { link: Linker; path: string; version: number }): string {
  return (
    `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width"><meta name="referrer" content="no-referrer">` +
    `<title>${esc(view.title)}</title><link rel="stylesheet" href="${esc(opts.link("/assets/console.css"))}">` +
    `<script src="${esc(opts.link("/assets/console.js"))}" defer></script></head>` +
    `<body data-path="${esc(opts.path)}" data-version="${opts.version}">` +
    `<header><a class="home" href="${esc(opts.link("/"))}">mesh console</a><span class="readonly">read-only</span><span id="live" role="status" data-live="off">not live (no script)</span></header>` +
    `<main id="view">${view.html}</main></body></html>`
  );
}
