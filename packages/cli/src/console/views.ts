/**
 * Which page a console path names, and the page itself from the console's state: the routing
 * is pure; rendering reads, besides the snapshot, a grant's history and its rotations through
 * the readers `meshctl trace` uses (rotation-records.ts), on the store without credentials.
 */
import { keys, parseGrantId, rotationId } from "@mesh/shared";
import { grantPage, graphModel, rotationTimeline } from "./model.js";
import { renderGrant, renderMissing, renderOverview, renderRotation, type Linker, type View } from "./html.js";
import { grantHistory, type ConsoleChange, type ConsoleState } from "./state.js";
import { findRotation, latestRotation, rotationsOf } from "../rotation-records.js";

/** A page of the console. */
export type Route = { page: "overview" } | { page: "grant"; grant: string } | { page: "rotation"; rotation: string };

/** The page `pathname` names; undefined for none. */
export function routeOf(pathname: string): Route | undefined {
  if (pathname === "/") return { page: "overview" };
  const g = /^\/grant\/([^/]+)\/([^/]+)$/.exec(pathname);
  if (g) {
    const id = `${decodeURIComponent(g[1]!)}/${decodeURIComponent(g[2]!)}`;
    return parseGrantId(id) ? { page: "grant", grant: id } : undefined;
  }
  const r = /^\/rotation\/([^/]+)\/([^/]+)\/(\d{1,9})$/.exec(pathname);
  if (r) {
    const grant = `${decodeURIComponent(r[1]!)}/${decodeURIComponent(r[2]!)}`;
    return parseGrantId(grant) ? { page: "rotation", rotation: rotationId(grant, Number(r[3])) } : undefined;
  }
  return undefined;
}

/**
 * Whether `change` can alter the page of `route`: the overview shows no verification record
 * (which the verifier rewrites at every check), a grant's page only its own records, a
 * rotation's page only its grant's rotation record. The live channel renders a page again only
 * when this holds.
 */
export function routeConcerns(route: Route, change: ConsoleChange): boolean {
  if (route.page === "overview") return change.bucket !== "verifications";
  const { module, requirement } = parseGrantId(route.page === "grant" ? route.grant : route.rotation.split("#")[0]!)!;
  const own = change.key === keys.grant(module, requirement);
  if (route.page === "grant") return own && (change.bucket === "grants" || change.bucket === "verifications" || change.bucket === "rotations");
  return own && change.bucket === "rotations";
}

/** Renders the page of `route` as the state is now. */
export async function renderRoute(state: ConsoleState, route: Route, link: Linker, now = new Date()): Promise<View> {
  const snap = state.snapshot;
  if (route.page === "overview") return renderOverview(graphModel(snap, now), link);
  if (route.page === "grant") {
    const { module, requirement } = parseGrantId(route.grant)!;
    const key = keys.grant(module, requirement);
    const g = snap.grants.get(key)?.value;
    if (!g) {
      return renderMissing(
        `no grant ${route.grant}`,
        `the resolver has written no grant ${route.grant} (yet): check the module's manifest names requirement ${requirement}, or look at meshctl explain ${module}`,
        link,
      );
    }
    const [history, rotations] = await Promise.all([grantHistory(state.store, key), rotationsOf(state.store, module, requirement)]);
    const verification = snap.verifications.get(key)?.value;
    return renderGrant(grantPage(g, { history, rotations, now, ...(verification ? { verification } : {}) }), link);
  }
  const found = await findRotation(state.store, route.rotation);
  if (!found) {
    const grant = route.rotation.split("#")[0]!;
    const latest = await latestRotation(state.store, grant);
    return renderMissing(
      `no rotation ${route.rotation} is recorded`,
      latest
        ? `the mesh keeps only the latest rotations of a grant; grant ${grant}'s latest is ${latest.id} (${latest.state})`
        : `grant ${grant} has never been rotated; start one with: meshctl rotate ${grant}`,
      link,
    );
  }
  return renderRotation(rotationTimeline(found.rotation), link);
}
