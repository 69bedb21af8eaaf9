import { describe, expect, it } from "vitest";
import { ModuleStates } from "@mesh/shared";
import { CliError } from "./cli-error.js";
import { ExitCodes } from "./exit-codes.js";
import { liveLine } from "./live-status.js";
import { judge, parseModuleState, waitLine, waitResult, type ModuleTarget } from "./module-wait.js";
import { bufferOutput } from "./output.js";
import { moduleStatus } from "./test-fixtures.js";

describe("parseModuleState", () => {
  it("takes every module state, in any case", () => {
    expect(parseModuleState("Ready")).toBe("Ready");
    expect(parseModuleState("nothingrequired")).toBe("NothingRequired");
    expect(parseModuleState("UNSATISFIABLE")).toBe("Unsatisfiable");
    for (const state of Object.values(ModuleStates)) expect(parseModuleState(state)).toBe(state);
  });

  it("refuses anything else as wrong usage, listing the states", () => {
    const e = (() => {
      try {
        parseModuleState("Satisfied");
      } catch (err) {
        return err as CliError;
      }
    })();
    expect(e).toBeInstanceOf(CliError);
    expect(e!.exitCode).toBe(ExitCodes.Usage);
    expect(e!.message).toBe(`--for: "Satisfied" is not a module state; give one of ${Object.values(ModuleStates).join(", ")}`);
    expect(e!.message).toContain("Ready, Degraded, Unsatisfiable");
  });
});

describe("judge", () => {
  const ready: ModuleTarget = { module: "shop", accept: ["Ready"] };

  it("waits for a module with no state, saying whether its manifest is stored", () => {
    expect(judge(ready, {})).toEqual({ verdict: "waiting", why: "no manifest of it is stored" });
    expect(judge(ready, { manifestRevision: 4 })).toEqual({ verdict: "waiting", why: "its manifest is stored, the resolver has not processed it yet" });
  });

  it("takes a state only from the stored manifest or a newer one", () => {
    const status = moduleStatus({ state: "Ready", message: "all requirements are satisfied", manifestRevision: 3 });
    expect(judge(ready, { status, manifestRevision: 3 }).verdict).toBe("met");
    expect(judge(ready, { status, manifestRevision: 5 })).toEqual({
      verdict: "waiting",
      why: "the resolver has not processed manifest revision 5 yet (last state, of revision 3: Ready: all requirements are satisfied)",
    });
    expect(judge({ ...ready, manifestRevision: 2 }, { status, manifestRevision: 9 }).verdict).toBe("met");
  });

  it("fails on a failing state only in a record written after the apply", () => {
    const settle: ModuleTarget = { module: "shop", accept: ["Ready", "NothingRequired"], failOn: ["Unsatisfiable"], manifestRevision: 3, freshAfter: 10 };
    const status = moduleStatus({ state: "Unsatisfiable", message: "db: NoProvider", manifestRevision: 3 });
    expect(judge(settle, { status, recordRevision: 11 })).toEqual({ verdict: "failed", why: "Unsatisfiable: db: NoProvider" });
    // Written before the apply: a Provider applied with it may change it yet.
    expect(judge(settle, { status, recordRevision: 9 })).toEqual({ verdict: "waiting", why: "Unsatisfiable: db: NoProvider" });
    expect(judge(settle, { status: { ...status, state: "NothingRequired" }, recordRevision: 9 }).verdict).toBe("met");
  });

  it("makes the progress line and the JSON entry from what was seen", () => {
    const r = waitResult(ready, { status: moduleStatus({ state: "Pending", message: "waiting for db", manifestRevision: 3 }), manifestRevision: 3 });
    expect(r).toMatchObject({ module: "shop", outcome: "waiting", state: "Pending", message: "waiting for db", processedRevision: 3, manifestRevision: 3 });
    expect(waitLine(r)).toBe("shop Pending: waiting for db");
    expect(waitLine(waitResult(ready, {}))).toBe("shop: no manifest of it is stored");
  });
});

describe("liveLine", () => {
  it("redraws one line on a terminal and ends it with a newline", () => {
    const out = bufferOutput({ isTTY: true });
    const line = liveLine(out, { timestamps: true });
    line.show("a");
    line.show("a");
    line.show("b");
    line.done();
    expect(out.stdout).toBe("\r\x1b[2Ka\r\x1b[2Kb\n");
  });

  it("cuts the line to the terminal's width, so that it can be redrawn in place", () => {
    const out = bufferOutput({ isTTY: true, columns: 10 });
    liveLine(out).show("shop Pending: waiting for db");
    expect(out.stdout).toBe("\r\x1b[2Kshop Pen…");
  });

  it("prints each change as its own timed line otherwise", () => {
    const out = bufferOutput();
    const line = liveLine(out, { timestamps: true });
    line.show("a");
    line.show("a");
    line.show("b");
    line.done();
    expect(out.stdout).toMatch(/^\d\d:\d\d:\d\d a\n\d\d:\d\d:\d\d b\n$/);
  });
});
