import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { matches, uncovered, within } from "./subject-containment.js";

describe("matches", () => {
  it.each([
    ["a.b", "a.b", true],
    ["a.b", "a.c", false],
    ["a.b", "a.b.c", false],
    ["a.*", "a.b", true],
    ["a.*", "a", false],
    ["a.*", "a.b.c", false],
    ["a.>", "a.b", true],
    ["a.>", "a.b.c", true],
    ["a.>", "a", false],
    [">", "a", true],
    [">", "a.b.c", true],
    ["*", "a", true],
    ["*", "a.b", false],
    ["*.b.>", "x.b.c.d", true],
    ["*.b.>", "x.c.d", false],
  ])("%s matches %s: %s", (p, s, want) => {
    expect(matches(p, s)).toBe(want);
  });
});

describe("within", () => {
  it.each([
    // A pattern is within itself, and within what is wider.
    ["a.b", ["a.b"], true],
    ["a.*", ["a.>"], true],
    ["a.*.c", ["a.>"], true],
    ["a.b.c", ["a.*.c"], true],
    ["a.>", ["a.>"], true],
    ["a.b.>", ["a.>"], true],
    ["a.>", [">"], true],
    ["*", [">"], true],
    // `>` is one or more tokens, `*` exactly one.
    ["a.>", ["a.*"], false],
    ["a.>", ["a.*.>"], false],
    ["a.*", ["a.*.>"], false],
    ["a", ["a.>"], false],
    ["a.>", ["a"], false],
    [">", ["*"], false],
    [">", ["*", "*.*", "*.*.*"], false],
    // Several ceiling patterns together.
    ["a.>", ["a.*", "a.*.>"], true],
    [">", ["*", "*.>"], true],
    ["a.*", ["a.b", "a.c"], false],
    ["a.*.c", ["a.b.c", "a.*.d"], false],
    ["a.*", ["a.b", "a.*"], true],
    // Literals must agree.
    ["a.b", ["a.c"], false],
    ["b.>", ["a.>"], false],
    ["$JS.API.>", ["app.shop.>", "_INBOX.>"], false],
    // An empty ceiling allows nothing.
    ["a", [], false],
  ])("%s within %j: %s", (p, ceiling, want) => {
    expect(within(p, ceiling)).toBe(want);
  });

  it("names a subject the pattern reaches and the ceiling does not", () => {
    expect(uncovered("a.>", ["a.*"])).toBe("a.x.x");
    expect(uncovered(">", ["app.shop.>"])).toBe("x");
    expect(uncovered("a.*", ["a.x"])).toBe("a.xx");
    expect(uncovered("a.*", ["a.>"])).toBeUndefined();
  });
});

/** Small alphabets, so that random patterns and subjects meet often. */
const literal = fc.constantFrom("a", "b", "c");
const pattern = fc
  .tuple(fc.array(fc.oneof(literal, fc.constant("*")), { minLength: 0, maxLength: 3 }), fc.boolean())
  .filter(([tokens, full]) => tokens.length > 0 || full)
  .map(([tokens, full]) => [...tokens, ...(full ? [">"] : [])].join("."));
const subject = fc.array(fc.constantFrom("a", "b", "c", "d"), { minLength: 1, maxLength: 5 }).map((t) => t.join("."));
const ceiling = fc.array(pattern, { minLength: 0, maxLength: 4 });

/** Every subject over `alphabet` of 1 to `length` tokens. */
function subjectsUpTo(alphabet: readonly string[], length: number): string[] {
  const out: string[] = [];
  let level = [""];
  for (let n = 1; n <= length; n++) {
    level = level.flatMap((prefix) => alphabet.map((t) => (prefix ? `${prefix}.${t}` : t)));
    out.push(...level);
  }
  return out;
}
/** The patterns' tokens and one that none has ("d"): longer subjects add nothing once past every pattern's length. */
const everySubject = subjectsUpTo(["a", "b", "c", "d"], 5);

describe("within, as properties", () => {
  it("is sound: a subject a pattern within the ceiling matches is matched by some ceiling pattern", () => {
    fc.assert(
      fc.property(pattern, ceiling, subject, (p, c, s) => {
        if (within(p, c) && matches(p, s)) expect(c.some((x) => matches(x, s))).toBe(true);
      }),
      { numRuns: 20_000 },
    );
  });

  it("is exact: when it says no, its witness is matched by the pattern and by no ceiling pattern", () => {
    fc.assert(
      fc.property(pattern, ceiling, (p, c) => {
        const w = uncovered(p, c);
        if (w === undefined) return;
        expect(matches(p, w)).toBe(true);
        expect(c.filter((x) => matches(x, w))).toEqual([]);
      }),
      { numRuns: 20_000 },
    );
  });

  it("agrees with checking every subject up to one token past the longest pattern", () => {
    fc.assert(
      fc.property(pattern, ceiling, (p, c) => {
        const byBruteForce = everySubject.every((s) => !matches(p, s) || c.some((x) => matches(x, s)));
        expect(within(p, c)).toBe(byBruteForce);
      }),
      { numRuns: 3_000 },
    );
  });

  it("every pattern is within itself and within >", () => {
    fc.assert(
      fc.property(pattern, (p) => {
        expect(within(p, [p])).toBe(true);
        expect(within(p, [">"])).toBe(true);
      }),
    );
  });
});
