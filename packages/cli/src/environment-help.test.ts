import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ENVIRONMENT, environmentOf, visibleCommands } from "./program.js";

/** Read by meshctl and said in another entry's words, or the system's own. */
const SAID_ELSEWHERE = new Set([
  "MESH_NATS_PASSWORD",
  "MESH_NATS_PASSWORD_FILE",
  "MESH_NATS_INBOX_PREFIX",
  "MESH_MASTER_KEY_FILE",
  "TERM",
  "PATH",
  "HOME",
  "XDG_CONFIG_HOME",
]);

/** Every `env.NAME` that meshctl's own sources read. */
function variablesRead(dir: string): Set<string> {
  const names = new Set<string>();
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, e.name);
    if (e.isDirectory()) for (const n of variablesRead(path)) names.add(n);
    else if (e.name.endsWith(".ts") && !e.name.endsWith(".test.ts"))
      for (const m of readFileSync(path, "utf8").matchAll(/\benv\.([A-Z][A-Z0-9_]+)/g)) names.add(m[1]!);
  }
  return names;
}

describe("meshctl's help on the environment", () => {
  it("names every variable meshctl reads", () => {
    const read = variablesRead(import.meta.dirname);
    expect(read).toContain("NATS_URL");
    const unsaid = [...read].filter((n) => !(n in ENVIRONMENT) && !SAID_ELSEWHERE.has(n));
    expect(unsaid).toEqual([]);
  });

  it("lists, for each command, only variables it explains", () => {
    for (const c of visibleCommands()) for (const n of environmentOf(c.name())) expect(ENVIRONMENT, `${c.name()}: ${n}`).toHaveProperty(n);
  });
});
