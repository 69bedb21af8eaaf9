/**
 * A real headless browser for tests: Debian's chromium (test/global-setup.ts installs it),
 * driven by playwright-core, which never downloads a browser of its own. Each start has a
 * fresh profile directory. Everything the page received is recorded: the body of every HTTP
 * response, and every message of its Server-Sent Events channels (read from Chromium's own
 * network events through CDP, since a stream's body is never complete).
 */
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium, type BrowserContext, type Page } from "playwright-core";

export const CHROMIUM_BIN = process.env.CHROMIUM_BIN || "/usr/bin/chromium";

/** The flags every test browser runs with: headless, no sandbox (root), nothing fetched from the network on its own. */
const CHROMIUM_ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

/** Where tests write screenshots: `test-artifacts/` of the repository (gitignored). */
export const ARTIFACTS_DIR = fileURLToPath(new URL("../../test-artifacts/", import.meta.url));

export interface TestBrowser {
  context: BrowserContext;
  page: Page;
  /** Bodies of every HTTP response the page got, with their URL. */
  responses: Array<{ url: string; status: number; body: string }>;
  /** Every Server-Sent Events message the page got: event name and data. */
  events: Array<{ event: string; data: string }>;
  /** Writes a screenshot of the whole page to `test-artifacts/<dir>/<name>.png`; returns its path. */
  screenshot(dir: string, name: string): Promise<string>;
  close(): Promise<void>;
}

export async function startBrowser(): Promise<TestBrowser> {
  const profile = mkdtempSync(join(tmpdir(), "mesh-chromium-"));
  let context: BrowserContext;
  try {
    context = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM_BIN,
      headless: true,
      args: CHROMIUM_ARGS,
      viewport: { width: 1400, height: 1000 },
    });
  } catch (e) {
    rmSync(profile, { recursive: true, force: true });
    throw e;
  }
  const page = context.pages()[0] ?? (await context.newPage());
  const responses: TestBrowser["responses"] = [];
  const events: TestBrowser["events"] = [];
  page.on("requestfinished", (req) => {
    void req.response().then(async (r) => {
      if (r) responses.push({ url: r.url(), status: r.status(), body: (await r.body().catch(() => Buffer.alloc(0))).toString("utf8") });
    });
  });
  const cdp = await context.newCDPSession(page);
  await cdp.send("Network.enable");
  cdp.on("Network.eventSourceMessageReceived", (m) => events.push({ event: m.eventName, data: m.data }));
  return {
    context,
    page,
    responses,
    events,
    async screenshot(dir, name) {
      const d = join(ARTIFACTS_DIR, dir);
      mkdirSync(d, { recursive: true });
      const path = join(d, `${name}.png`);
      await page.screenshot({ path, fullPage: true });
      return path;
    },
    async close() {
      await context.close().catch(() => undefined);
      rmSync(profile, { recursive: true, force: true });
    },
  };
}
