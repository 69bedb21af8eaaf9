/**
 * The console's HTTP side, thin: every request passes access.ts's checks, then gets a
 * page (views.ts), an asset of the package, or the live channel: Server-Sent Events
 * that carry the page's new contents whenever the state behind it changed. Nothing here
 * writes to the mesh.
 */
import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { createServer as createHttpsServer } from "node:https";
import type { AddressInfo } from "node:net";
import { errorMessage } from "@mesh/shared";
import { checkRequest, type AccessPolicy } from "./access.js";
import { renderDocument, type Linker, type View } from "./html.js";
import { carriedFile } from "../release-build.js";
import type { ConsoleState } from "./state.js";
import { renderRoute, routeConcerns, routeOf, type Route } from "./views.js";

/** The assets the page loads: the package's `assets/` directory, which a release's meshctl carries inside (release-build.ts). */
const ASSETS: Record<string, string> = { "/assets/console.js": "text/javascript; charset=utf-8", "/assets/console.css": "text/css; charset=utf-8" };

/** Asset `name` (`console.js`): from the release build, else from the source tree's `packages/cli/assets/`. */
function readAsset(name: string): Buffer {
  return Buffer.from(carriedFile("consoleAssets", name, new URL(`../../assets/${name}`, import.meta.url)), "utf8");
}

/** What every answer carries: nothing cached, no script but ours, no framing, no referrer (the URL has the token). */
const SECURITY_HEADERS = {
  "Cache-Control": "no-store",
  "Content-Security-Policy":
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  "X-Content-Type-Options": "nosniff",
  "Referrer-Policy": "no-referrer",
  "X-Frame-Options": "DENY",
};

/** How long the live channel waits after a change before it renders, so a burst of changes is sent once. */
const LIVE_DEBOUNCE_MS = 100;
/** A comment line this often keeps proxies and the browser from closing an idle channel. */
const LIVE_HEARTBEAT_MS = 15_000;

export interface ConsoleServerOptions {
  state: ConsoleState;
  access: AccessPolicy;
  tls?: { cert: string; key: string };
}

/** A console being served. */
export interface ConsoleServer {
  server: Server;
  port(): number;
  /** Closes the live channels and the server. */
  close(): Promise<void>;
}

function send(res: ServerResponse, status: number, type: string, body: string | Buffer, head = false): void {
  res.writeHead(status, { ...SECURITY_HEADERS, "Content-Type": type, "Content-Length": Buffer.byteLength(body) });
  res.end(head ? undefined : body);
}

/** Builds the HTTP server (not yet listening). */
export function createConsoleServer(opts: ConsoleServerOptions): ConsoleServer {
  const { state, access } = opts;
  const link: Linker = (path) => `${path}${path.includes("?") ? "&" : "?"}token=${encodeURIComponent(access.token)}`;
  const assets = new Map(Object.keys(ASSETS).map((p) => [p, readAsset(p.slice("/assets/".length))]));
  const channels = new Set<ServerResponse>();
  // One rendering per page and version, shared by every channel that follows the page.
  const rendered = new Map<string, { version: number; view: Promise<View> }>();
  const renderShared = (path: string, route: Route): Promise<View> => {
    const hit = rendered.get(path);
    if (hit && hit.version === state.version) return hit.view;
    const view = renderRoute(state, route, link);
    if (rendered.size >= 100) rendered.clear(); // pages nobody follows any more
    rendered.set(path, { version: state.version, view });
    view.catch(() => rendered.delete(path));
    return view;
  };

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const url = new URL(req.url ?? "/", "http://console.invalid");
    const refusal = checkRequest(
      { method: req.method ?? "GET", host: req.headers.host, origin: req.headers.origin, token: url.searchParams.get("token") },
      access,
    );
    if (refusal) return send(res, refusal.status, "text/plain; charset=utf-8", `meshctl console: ${refusal.message}\n`);
    const head = req.method === "HEAD";
    const asset = assets.get(url.pathname);
    if (asset) return send(res, 200, ASSETS[url.pathname]!, asset, head);
    if (url.pathname === "/events") return live(req, res, url);
    const route = routeOf(url.pathname);
    if (!route)
      return send(
        res,
        404,
        "text/plain; charset=utf-8",
        `meshctl console: no page ${url.pathname}; the pages are /, /grant/MODULE/REQUIREMENT and /rotation/MODULE/REQUIREMENT/GENERATION\n`,
        head,
      );
    const version = state.version;
    const view = await renderRoute(state, route, link);
    send(res, 200, "text/html; charset=utf-8", renderDocument(view, { link, path: url.pathname, version }), head);
  };

  /** The live channel of page `path`: sends the page's contents each time they change, from version `since` on. */
  const live = async (req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> => {
    const path = url.searchParams.get("path") ?? "/";
    const route = routeOf(path);
    if (!route) return send(res, 404, "text/plain; charset=utf-8", `meshctl console: no page ${path} to follow\n`);
    const since = Number(url.searchParams.get("since") ?? -1);
    res.writeHead(200, { ...SECURITY_HEADERS, "Content-Type": "text/event-stream; charset=utf-8", Connection: "keep-alive" });
    res.write(": live\n\n");
    channels.add(res);
    let last: string | undefined;
    let timer: NodeJS.Timeout | undefined;
    let rendering = false;
    let again = false;
    const push = async () => {
      timer = undefined;
      if (rendering) {
        again = true;
        return;
      }
      rendering = true;
      try {
        const view = await renderShared(path, route);
        const data = JSON.stringify({ version: state.version, title: view.title, html: view.html });
        if (view.html !== last && !res.writableEnded) res.write(`event: view\ndata: ${data}\n\n`);
        last = view.html;
      } catch (e) {
        if (!res.writableEnded)
          res.write(
            `event: problem\ndata: ${JSON.stringify({ message: `the console could not read the mesh's state: ${errorMessage(e)}; it tries again at the next change` })}\n\n`,
          );
      } finally {
        rendering = false;
        if (again) {
          again = false;
          schedule();
        }
      }
    };
    const schedule = () => {
      timer ??= setTimeout(() => void push(), LIVE_DEBOUNCE_MS);
    };
    const unsubscribe = state.onChange((_version, change) => {
      if (routeConcerns(route, change)) schedule();
    });
    const heartbeat = setInterval(() => res.write(": heartbeat\n\n"), LIVE_HEARTBEAT_MS);
    const end = () => {
      unsubscribe();
      clearInterval(heartbeat);
      if (timer) clearTimeout(timer);
      channels.delete(res);
    };
    req.once("close", end);
    // What changed between the page and this channel is sent at once; the page's own contents are not sent again.
    if (since !== state.version) schedule();
  };

  const listener = (req: IncomingMessage, res: ServerResponse) => {
    handle(req, res).catch((e: unknown) => {
      if (!res.headersSent)
        send(
          res,
          500,
          "text/plain; charset=utf-8",
          `meshctl console: this page failed: ${errorMessage(e)}; reload it, and if it lasts, look at meshctl status\n`,
        );
      else res.end();
    });
  };
  const server = opts.tls ? createHttpsServer({ cert: opts.tls.cert, key: opts.tls.key }, listener) : createHttpServer(listener);
  return {
    server,
    port: () => (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        for (const c of channels) c.end();
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
