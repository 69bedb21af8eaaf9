import { describe, expect, it } from "vitest";
import { makeStyle, pad, visibleLength, wrapText } from "./style.js";

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
