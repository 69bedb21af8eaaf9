/**
 * Every limit of limits.ts, at its value and one past it (the table in docs/security.md names
 * these cases).
 */
import { describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { Limits, MAX_ROTATE_EVERY_MS, MAX_TIMER_MS } from "./limits.js";
import { parseTimerDuration } from "./duration.js";
import { ModuleDoc, ProviderDoc } from "./schemas/manifest.js";
import { parseManifestText } from "./schemas/manifest-text.js";
import { RotateRequest } from "./schemas/rotation.js";
import { NAME_MAX_LENGTH } from "./names.js";

const names = (n: number, prefix: string) => Array.from({ length: n }, (_, i) => `${prefix}${i}`);
const provider = (over: Record<string, unknown> = {}) => ({
  kind: "Provider",
  name: "p",
  serves: ["secret"],
  node: "n1",
  endpoint: "postgres://127.0.0.1:5432",
  ...over,
});
const module = (over: Record<string, unknown> = {}) => ({ kind: "Module", name: "m", parts: [{ name: "app", node: "n1" }], requires: [], ...over });
const requirement = (over: Record<string, unknown> = {}) => ({ name: "key", kind: "secret", ...over });

/** The messages of a document refused by `schema`, or [] when it is accepted. */
function refusals(schema: { safeParse(v: unknown): { success: boolean; error?: { issues: Array<{ message: string }> } } }, doc: unknown): string[] {
  const r = schema.safeParse(doc);
  return r.success ? [] : r.error!.issues.map((i) => i.message);
}

describe("each limit: accepted at its value, refused one past it, with a message that names it", () => {
  // [what, schema, document at the limit, document one past it, message]
  const cases: Array<[string, typeof ModuleDoc | typeof ProviderDoc | typeof RotateRequest, unknown, unknown, RegExp]> = [
    [
      "parts of a module",
      ModuleDoc,
      module({ parts: names(Limits.parts, "p").map((name) => ({ name, node: "n1" })) }),
      module({ parts: names(Limits.parts + 1, "p").map((name) => ({ name, node: "n1" })) }),
      /at most 64 parts/,
    ],
    [
      "requirements of a module",
      ModuleDoc,
      module({ requires: names(Limits.requirements, "r").map((name) => requirement({ name })) }),
      module({ requires: names(Limits.requirements + 1, "r").map((name) => requirement({ name })) }),
      /at most 128 requirements/,
    ],
    [
      "parts named by a requirement",
      ModuleDoc,
      module({
        parts: names(Limits.requirementParts, "p").map((name) => ({ name, node: "n1" })),
        requires: [requirement({ parts: names(Limits.requirementParts, "p") })],
      }),
      module({
        parts: names(Limits.requirementParts, "p").map((name) => ({ name, node: "n1" })),
        requires: [requirement({ parts: [...names(Limits.requirementParts, "p"), "p0"] })],
      }),
      /at most 64 parts/,
    ],
    [
      "options of a requirement",
      ModuleDoc,
      module({ requires: [requirement({ options: Object.fromEntries(names(Limits.options, "o").map((k) => [k, "v"])) })] }),
      module({ requires: [requirement({ options: Object.fromEntries(names(Limits.options + 1, "o").map((k) => [k, "v"])) })] }),
      /at most 32 options/,
    ],
    [
      "items of a list option",
      ModuleDoc,
      module({ requires: [requirement({ options: { subjects: names(Limits.optionItems, "s.") } })] }),
      module({ requires: [requirement({ options: { subjects: names(Limits.optionItems + 1, "s.") } })] }),
      /at most 256 items/,
    ],
    [
      "an option value",
      ModuleDoc,
      module({ requires: [requirement({ options: { x: "a".repeat(Limits.optionChars) } })] }),
      module({ requires: [requirement({ options: { x: "a".repeat(Limits.optionChars + 1) } })] }),
      /at most 4096 characters/,
    ],
    [
      "an item of a list option",
      ModuleDoc,
      module({ requires: [requirement({ options: { x: ["a".repeat(Limits.optionChars)] } })] }),
      module({ requires: [requirement({ options: { x: ["a".repeat(Limits.optionChars + 1)] } })] }),
      /at most 4096 characters/,
    ],
    [
      "a part's onRotate, a hook name",
      ModuleDoc,
      module({ parts: [{ name: "app", node: "n1", onRotate: "h".repeat(NAME_MAX_LENGTH) }] }),
      module({ parts: [{ name: "app", node: "n1", onRotate: "h".repeat(NAME_MAX_LENGTH + 1) }] }),
      /is not a hook name: .*1-40 characters/,
    ],
    [
      "verify.every, a timer",
      ModuleDoc,
      module({ requires: [requirement({ verify: { every: `${MAX_TIMER_MS}ms` } })] }),
      module({ requires: [requirement({ verify: { every: `${MAX_TIMER_MS + 1}ms` } })] }),
      /at most 2147483647ms/,
    ],
    [
      "rotate.every",
      ModuleDoc,
      module({ requires: [requirement({ rotate: { every: `${MAX_ROTATE_EVERY_MS / 86_400_000}d` } })] }),
      module({ requires: [requirement({ rotate: { every: `${MAX_ROTATE_EVERY_MS / 86_400_000 + 1}d` } })] }),
      /at most 3650d/,
    ],
    [
      "kinds a provider serves",
      ProviderDoc,
      provider({ serves: Array(Limits.serves).fill("secret") }),
      provider({ serves: Array(Limits.serves + 1).fill("secret") }),
      /at most 16 kinds/,
    ],
    [
      "grants a provider needs",
      ProviderDoc,
      provider({ needs: names(Limits.needs, "m/r") }),
      provider({ needs: names(Limits.needs + 1, "m/r") }),
      /at most 32 grants/,
    ],
    [
      "options of a provider",
      ProviderDoc,
      provider({ options: Object.fromEntries(names(Limits.options, "o").map((k) => [k, "v"])) }),
      provider({ options: Object.fromEntries(names(Limits.options + 1, "o").map((k) => [k, "v"])) }),
      /at most 32 options/,
    ],
    [
      "items of a provider's list option",
      ProviderDoc,
      provider({ options: { allowPublish: names(Limits.optionItems, "s.") } }),
      provider({ options: { allowPublish: names(Limits.optionItems + 1, "s.") } }),
      /at most 256 items/,
    ],
    [
      "an item of a provider's list option",
      ProviderDoc,
      provider({ options: { x: ["a".repeat(Limits.optionChars)] } }),
      provider({ options: { x: ["a".repeat(Limits.optionChars + 1)] } }),
      /at most 4096 characters/,
    ],
    [
      "a provider option value",
      ProviderDoc,
      provider({ options: { x: "a".repeat(Limits.optionChars) } }),
      provider({ options: { x: "a".repeat(Limits.optionChars + 1) } }),
      /at most 4096 characters/,
    ],
    [
      "a provider's endpoint",
      ProviderDoc,
      provider({ endpoint: `postgres://127.0.0.1:5432/${"d".repeat(Limits.endpointChars - "postgres://127.0.0.1:5432/".length)}` }),
      provider({ endpoint: `postgres://127.0.0.1:5432/${"d".repeat(Limits.endpointChars + 1 - "postgres://127.0.0.1:5432/".length)}` }),
      /at most 2048 characters/,
    ],
    [
      "an admin passwordFile",
      ProviderDoc,
      provider({ admin: { username: "a", passwordFile: `/${"f".repeat(Limits.pathChars - 1)}` } }),
      provider({ admin: { username: "a", passwordFile: `/${"f".repeat(Limits.pathChars)}` } }),
      /at most 4096 characters/,
    ],
    ["a rotation's deadline, a timer", RotateRequest, { grant: "m/r", timeoutMs: MAX_TIMER_MS }, { grant: "m/r", timeoutMs: MAX_TIMER_MS + 1 }, /2147483647/],
  ];

  it.each(cases)("%s", (_, schema, atLimit, pastLimit, message) => {
    expect(refusals(schema, atLimit)).toEqual([]);
    const refused = refusals(schema, pastLimit);
    expect(refused.length).toBeGreaterThan(0);
    expect(refused.join("; ")).toMatch(message);
  });
});

describe("limits on manifest text", () => {
  /** A valid one-document YAML file padded with a comment to exactly `bytes` bytes. */
  const fileOf = (bytes: number) => {
    const body = stringify(module());
    return body + "#" + "x".repeat(bytes - Buffer.byteLength(body) - 2) + "\n";
  };

  it("takes a file of 512 KiB and refuses one byte more, saying to split it", () => {
    expect(Buffer.byteLength(fileOf(Limits.manifestBytes))).toBe(Limits.manifestBytes);
    expect(parseManifestText(fileOf(Limits.manifestBytes)).ok).toBe(true);
    const r = parseManifestText(fileOf(Limits.manifestBytes + 1));
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.problems[0]!.message).toMatch(/at most 512 KiB: split it/);
  });

  it("takes 256 documents and refuses 257", () => {
    const docs = (n: number) => names(n, "m").map((name) => module({ name }));
    expect(parseManifestText(JSON.stringify(docs(Limits.documents))).ok).toBe(true);
    const r = parseManifestText(JSON.stringify(docs(Limits.documents + 1)));
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.problems[0]!.message).toMatch(/at most 256 go in one file or one apply/);
  });

  /** A module whose list option holds `n` aliases of one anchored value. */
  const withAliases = (n: number) =>
    [
      "kind: Module",
      "name: m",
      "parts: [{ name: app, node: n1 }]",
      "requires:",
      "  - name: key",
      "    kind: secret",
      "    options:",
      "      first: &s x",
      `      more: [${Array(n).fill("*s").join(", ")}]`,
      "",
    ].join("\n");

  it("takes 100 alias expansions in a document and refuses 101, as a problem of the file", () => {
    // yaml counts, per anchor, its resolutions (the anchor's own, then one per alias) times the
    // aliases inside it (at least one): n aliases of a plain value count n + 1.
    expect(parseManifestText(withAliases(Limits.yamlAliases - 1)).ok).toBe(true);
    const past = parseManifestText(withAliases(Limits.yamlAliases));
    expect(past.ok).toBe(false);
    if (!past.ok) expect(past.problems[0]).toMatchObject({ document: 0, message: expect.stringMatching(/at most 100 aliases/) });
  });

  it("reports a billion-laughs alias bomb as a problem of the file, without expanding it", () => {
    const levels = ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"];
    for (let i = 1; i < 9; i++)
      levels.push(
        `${String.fromCharCode(97 + i)}: &${String.fromCharCode(97 + i)} [${Array(9)
          .fill(`*${String.fromCharCode(96 + i)}`)
          .join(", ")}]`,
      );
    const r = parseManifestText(`kind: Module\nname: m\n${levels.join("\n")}\n`);
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.problems.map((p) => p.message).join("; ")).toMatch(/alias/i);
  });
});

describe("durations that become timers", () => {
  it("takes 2147483647ms and refuses one more, naming the setting", () => {
    expect(parseTimerDuration(`${MAX_TIMER_MS}ms`, "--timeout")).toBe(MAX_TIMER_MS);
    expect(() => parseTimerDuration(`${MAX_TIMER_MS + 1}ms`, "--timeout")).toThrow(/^--timeout: .* a timer may be at most 2147483647ms/);
    expect(() => parseTimerDuration("30d", "MESH_VERIFY_INTERVAL")).toThrow(/^MESH_VERIFY_INTERVAL: "30d" is too long/);
    expect(() => parseTimerDuration("soon", "MESH_PROBE_INTERVAL")).toThrow(/^MESH_PROBE_INTERVAL: not a duration/);
  });
});
