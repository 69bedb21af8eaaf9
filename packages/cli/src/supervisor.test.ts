import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { Supervisor, type ChildEvent } from "./supervisor.js";
import { waitFor } from "../../../test/harness/wait.js";

const dir = mkdtempSync(join(tmpdir(), "meshctl-supervisor-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function script(name: string, body: string): string {
  const p = join(dir, name);
  writeFileSync(p, body);
  return p;
}

const crash = script("crash.js", `console.error("boom " + process.env.WHO); process.exit(3);`);
// "up" only once the handler is installed: the test sends SIGTERM as soon as it reads it.
const polite = script(
  "polite.js",
  `process.on("SIGTERM", () => { console.error("bye"); process.exit(0); }); console.error("up " + process.env.WHO); setInterval(() => {}, 1000);`,
);
const stubborn = script("stubborn.js", `process.on("SIGTERM", () => console.error("not stopping")); setInterval(() => {}, 1000); console.error("ready");`);

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe("Supervisor", () => {
  it("restarts a service that exits, then gives up when it keeps failing right after start", async () => {
    const events: ChildEvent[] = [];
    let gaveUp!: () => void;
    const done = new Promise<void>((r) => (gaveUp = r));
    const sup = new Supervisor({
      onEvent: (e) => (events.push(e), e.type === "gave-up" && gaveUp()),
      maxQuickExits: 3,
      backoffMs: () => 20,
    });
    const log = join(dir, "crash.log");
    await sup.start({ name: "crasher", script: crash, env: { WHO: "c1" }, logFile: log });
    await done;
    expect(events.map((e) => e.type)).toEqual(["exited", "exited", "gave-up"]);
    expect(events[0]).toMatchObject({ name: "crasher", code: 3, signal: null, logFile: log, restartInMs: 20 });
    expect(readFileSync(log, "utf8").match(/boom c1/g)).toHaveLength(3);
    // A service's log is its own user's alone.
    expect((statSync(log).mode & 0o777).toString(8)).toBe("600");
    expect(sup.running()).toEqual([]);
    await sup.stop();
  });

  it("stops services with SIGTERM, and SIGKILLs one that ignores it after the grace period", async () => {
    const sup = new Supervisor({ onEvent: (e) => expect.fail(`unexpected event ${e.type}`) });
    const politeLog = join(dir, "polite.log");
    const stubbornLog = join(dir, "stubborn.log");
    const p1 = await sup.start({ name: "polite", script: polite, env: { WHO: "p1" }, logFile: politeLog });
    const p2 = await sup.start({ name: "stubborn", script: stubborn, env: {}, logFile: stubbornLog });
    await waitFor(
      "both to have installed their handlers",
      () => readFileSync(politeLog, "utf8").includes("up p1") && readFileSync(stubbornLog, "utf8").includes("ready"),
      5_000,
    );
    expect(sup.running().map((r) => r.name)).toEqual(["polite", "stubborn"]);
    const t0 = Date.now();
    await sup.stop(500);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(450);
    expect(alive(p1)).toBe(false);
    expect(alive(p2)).toBe(false);
    expect(readFileSync(politeLog, "utf8")).toContain("bye");
    expect(readFileSync(stubbornLog, "utf8")).toContain("not stopping");
  });
});
