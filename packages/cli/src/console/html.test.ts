import { describe, expect, it } from "vitest";
import { esc, renderDocument, renderGrant, renderOverview, renderRotation } from "./html.js";
import { layoutGraph } from "./layout.js";
import { grantPage, rotationTimeline, type GraphModel } from "./model.js";
import { NOW, readyDb, rotationFixture } from "../test-fixtures.js";

const link = (p: string) => `${p}?token=T`;

const model: GraphModel = {
  nodes: [
    {
      id: "module:shop",
      column: "module",
      label: "shop",
      state: "Unsatisfiable",
      tone: "bad",
      reason: "Unsatisfiable",
      detail: "db: <script>alert(1)</script>",
      lines: ["1 requirement"],
    },
    {
      id: "requirement:shop/db",
      column: "requirement",
      label: "db",
      state: "cannot be satisfied yet",
      tone: "bad",
      reason: "Unsatisfiable",
      detail: "why",
      lines: ["postgres.database, for api"],
      href: "/grant/shop/db",
    },
    {
      id: "grant:shop/db",
      column: "grant",
      label: "shop/db",
      state: "Resolved False",
      tone: "bad",
      reason: "ProviderUnreachable from node-b",
      lines: ["postgres.database", "generation 0"],
      href: "/grant/shop/db",
    },
    {
      id: "provider:pg-main",
      column: "provider",
      label: "pg-main",
      state: "installed",
      tone: "warn",
      reason: "ProviderUnreachable from node-b",
      lines: ["serves postgres.database"],
    },
  ],
  edges: [
    { from: "module:shop", to: "requirement:shop/db", label: "requires" },
    { from: "requirement:shop/db", to: "grant:shop/db", label: "granted as" },
    { from: "grant:shop/db", to: "provider:pg-main", label: "served by" },
  ],
  summary: [{ state: "Unsatisfiable", tone: "bad", count: 1 }],
  running: [],
};

describe("the console's HTML", () => {
  it("escapes every value", () => {
    expect(esc(`<a href="x">'&'</a>`)).toBe("&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
    const v = renderOverview(model, link);
    expect(v.html).not.toContain("<script>");
    expect(v.html).toContain("db: &lt;script&gt;alert(1)&lt;/script&gt;");
  });

  it("has names, states and reasons as text, in the graph and in the tables, with links carrying the token", () => {
    const v = renderOverview(model, link);
    // In the SVG: one <text> per line of each box.
    expect(v.html).toMatch(
      /<g class="node grant tone-bad" data-node="grant:shop\/db"[^>]*>[\s\S]*?<text class="reason"[^>]*>ProviderUnreachable from node-b<\/text>/,
    );
    expect(v.html).toContain('<tbody class="module" data-module="shop" data-state="Unsatisfiable">');
    expect(v.html).toContain('<td class="reason">ProviderUnreachable from node-b</td>');
    expect(v.html).toContain('href="/grant/shop/db?token=T"');
    expect(v.html).toContain('<tr class="provider tone-warn" data-provider="pg-main" data-state="installed">');
  });

  it("lays the same graph out the same way, left to right by column", () => {
    const a = layoutGraph(model);
    expect(layoutGraph(model)).toEqual(a);
    const x = (id: string) => a.nodes.find((n) => n.id === id)!.x;
    expect(x("module:shop")).toBeLessThan(x("requirement:shop/db"));
    expect(x("requirement:shop/db")).toBeLessThan(x("grant:shop/db"));
    expect(x("grant:shop/db")).toBeLessThan(x("provider:pg-main"));
    expect(a.edges.every((e) => e.points.length >= 2)).toBe(true);
  });

  it("renders a grant page with its sections, and says what is missing", () => {
    const v = renderGrant(grantPage(readyDb, { now: NOW }), link);
    for (const h of ["Conditions", "Generations", "Holders", "Verification", "Repairs", "Rotations"]) expect(v.html).toContain(`<h2>${h}</h2>`);
    expect(v.html).toContain("the verifier has not checked it yet");
    expect(v.html).toContain("never rotated");
    expect(v.html).toContain('<tr data-holder="node-a/api"><th>node-a/api</th><td>1</td>');
  });

  it("renders a rotation's fan-out one row per holder, Stalled marked, naming where each time comes from", () => {
    const r = rotationFixture({
      state: "Stalled",
      holders: { "node-a/api": { r: 12, a: 140, c: 151 }, "node-b/worker": {} },
      traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    });
    const v = renderRotation(rotationTimeline(r), link);
    expect(v.title).toBe("rotation shop/db#2: Stalled");
    expect(v.html).toContain('<tr class="holder tone-bad" data-holder="node-b/worker" data-status="stalled">');
    expect(v.html).toContain("Stalled: not confirmed");
    expect(v.html).toContain('<td class="applied">+0.140 s');
    expect(v.html).toContain("the holder&#39;s clock, in those older rotations: when it had written the files");
    expect(v.html).toContain("the NATS server&#39;s clock: when it recorded the holder&#39;s ack of the broadcast");
    expect(v.html).toContain("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
  });

  it("wraps a view in a document whose script and style come from the console itself", () => {
    const doc = renderDocument({ title: "t <1>", html: "<p>x</p>" }, { link, path: "/grant/shop/db", version: 7 });
    expect(doc).toContain("<title>t &lt;1&gt;</title>");
    expect(doc).toContain('<script src="/assets/console.js?token=T" defer></script>');
    expect(doc).toContain('<body data-path="/grant/shop/db" data-version="7">');
    expect(doc).toContain('<main id="view"><p>x</p></main>');
    expect(doc).not.toMatch(/https?:\/\//);
  });
});
