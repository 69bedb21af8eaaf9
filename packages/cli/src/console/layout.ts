/**
 * Where the console draws the graph's boxes and arrows: a layered layout (dagre, as Graphviz's
 * `dot` does it) left to right, computed here on the server, so the page needs no script to
 * show it and the same graph always lands in the same place. Pure.
 */
import dagre from "@dagrejs/dagre";
import type { GraphEdge, GraphModel, GraphNode } from "./model.js";

/** A box's width, and the height of one line of text in it. */
export const NODE_WIDTH = 250;
export const LINE_HEIGHT = 16;
const PADDING = 10;

/** A node with its box: centre `x`, `y`, and size. */
export interface PlacedNode extends GraphNode {
  x: number;
  y: number;
  width: number;
  height: number;
}

/** An edge with the points of its path. */
export interface PlacedEdge extends GraphEdge {
  points: Array<{ x: number; y: number }>;
}

export interface GraphLayout {
  nodes: PlacedNode[];
  edges: PlacedEdge[];
  width: number;
  height: number;
}

/** How many lines of text a node's box holds: label, state, reason (if any), its facts. */
export function nodeLines(n: GraphNode): number {
  return 2 + (n.reason ? 1 : 0) + n.lines.length;
}

/** Lays the graph out; an empty graph has size 0. */
export function layoutGraph(model: GraphModel): GraphLayout {
  if (model.nodes.length === 0) return { nodes: [], edges: [], width: 0, height: 0 };
  const g = new dagre.graphlib.Graph({ multigraph: true });
  g.setGraph({ rankdir: "LR", nodesep: 18, ranksep: 70, marginx: 10, marginy: 10 });
  g.setDefaultEdgeLabel(() => ({}));
  for (const n of model.nodes) g.setNode(n.id, { width: NODE_WIDTH, height: nodeLines(n) * LINE_HEIGHT + 2 * PADDING });
  model.edges.forEach((e, i) => {
    // A provider's needs point back at a grant: laid out as if reversed, so the columns stay put.
    if (e.label === "needs") g.setEdge(e.to, e.from, { weight: 0, minlen: 1 }, `e${i}`);
    else g.setEdge(e.from, e.to, { weight: 1, minlen: 1 }, `e${i}`);
  });
  dagre.layout(g);
  const nodes = model.nodes.map((n) => {
    const p = g.node(n.id);
    return { ...n, x: p.x, y: p.y, width: p.width, height: p.height };
  });
  const edges = model.edges.map((e, i) => {
    const pts = e.label === "needs" ? g.edge(e.to, e.from, `e${i}`).points : g.edge(e.from, e.to, `e${i}`).points;
    return { ...e, points: (e.label === "needs" ? [...pts].reverse() : pts).map((p: { x: number; y: number }) => ({ x: p.x, y: p.y })) };
  });
  const graph = g.graph();
  return { nodes, edges, width: graph.width ?? 0, height: graph.height ?? 0 };
}
