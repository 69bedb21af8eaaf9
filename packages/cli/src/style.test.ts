import { describe, expect, it } from "vitest";
import { makeStyle, pad, printable, truncate, visibleLength, wrapText } from "./style.js";

describe("printable", () => {
  it("shows control characters from the store as escapes, so a message cannot drive the terminal", () => {
    expect(printable("ok\u001b[2J\u001b]0;pwned\u0007 done\u009b")).toBe("ok\\x1b[2J\\x1b]0;pwned\\x07 done\\x9b");
    expect(printable("line one\nline two\tand tab")).toBe("line one\nline two\tand tab");
    expect(printable("café ✓")).toBe("café ✓");
  });
  it("applies to every wrapped message", () => {
    expect(wrapText("a \u001b[31mred\u001b[0m word", 80)).toEqual(["a \\x1b[31mred\\x1b[0m word"]);
  });
});

describe("wrapText", () => {
  it("breaks at spaces within the width, with the indent on every line", () => {
    expect(wrapText("one two three four", 12, "  ")).toEqual(["  one two", "  three four"]);
    expect(wrapText("", 20)).toEqual([]);
  });
  it("cuts a word longer than the line", () => {
    const lines = wrapText(`see ${"x".repeat(25)} now`, 10);
    expect(lines).toEqual(["see", "xxxxxxxxxx", "xxxxxxxxxx", "xxxxx now"]);
    for (const l of lines) expect(l.length).toBeLessThanOrEqual(10);
  });
});

describe("makeStyle and pad", () => {
  it("leaves text alone without colour and pads by visible width with it", () => {
    expect(makeStyle(false).bad("x")).toBe("x");
    const red = makeStyle(true).bad("False");
    expect(red).not.toBe("False");
    expect(visibleLength(red)).toBe(5);
    expect(visibleLength(pad(red, 7))).toBe(7);
  });
});

describe("truncate", () => {
  it("cuts to a width with an ellipsis, keeping colours and resetting them after the cut", () => {
    expect(truncate("short", 10)).toBe("short");
    expect(truncate("a longer line", 8)).toBe("a longe…");
    expect(truncate("\x1b[32mReady\x1b[39m and more", 7)).toBe("\x1b[32mReady\x1b[39m …\x1b[0m");
  });
});
