import { describe, expect, it } from "vitest";
import { endpointAddress, formatAddress } from "./endpoint-address.js";

describe("endpointAddress", () => {
  it.each([
    { endpoint: "postgres://127.0.0.1:5433", address: { host: "127.0.0.1", port: 5433 } },
    { endpoint: "postgresql://db.internal", address: { host: "db.internal", port: 5432 } },
    { endpoint: "postgres://[::1]:6000/app", address: { host: "::1", port: 6000 } },
    { endpoint: "redis://cache", address: { host: "cache", port: 6379 } },
    { endpoint: "builtin://secret", address: undefined },
    { endpoint: "weird://host", address: undefined },
    { endpoint: "not a url", address: undefined },
  ])("$endpoint", ({ endpoint, address }) => {
    expect(endpointAddress(endpoint)).toEqual(address);
  });
  it("formats IPv6 in brackets", () => {
    expect(formatAddress({ host: "::1", port: 5432 })).toBe("[::1]:5432");
    expect(formatAddress({ host: "10.0.0.1", port: 5432 })).toBe("10.0.0.1:5432");
  });
});
