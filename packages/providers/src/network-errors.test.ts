import { describe, expect, it } from "vitest";
import { hasNetworkCode } from "./network-errors.js";

const coded = (code: string) => Object.assign(new Error(code), { code });

describe("hasNetworkCode", () => {
  it("knows a server that could not be reached or dropped the connection from one that answered", () => {
    expect(hasNetworkCode(coded("ECONNREFUSED"))).toBe(true);
    expect(hasNetworkCode(coded("EPIPE"))).toBe(true);
    expect(hasNetworkCode(coded("28P01"))).toBe(false);
    expect(hasNetworkCode(new Error("password authentication failed"))).toBe(false);
    expect(hasNetworkCode(undefined)).toBe(false);
  });

  it("looks into an aggregate of connects to every address of a name, and takes a driver's own codes", () => {
    expect(hasNetworkCode(new AggregateError([coded("EADDRNOTAVAIL"), coded("ECONNREFUSED")]))).toBe(true);
    expect(hasNetworkCode(coded("PROTOCOL_CONNECTION_LOST"))).toBe(false);
    expect(hasNetworkCode(coded("PROTOCOL_CONNECTION_LOST"), new Set(["PROTOCOL_CONNECTION_LOST"]))).toBe(true);
  });
});
