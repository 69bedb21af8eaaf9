import { describe, expect, it } from "vitest";
import { ErrorCodes, isMeshError } from "@mesh/shared";
import { caCeiling, certificateRequest, isDnsName } from "./tls-request.js";

const grant = { module: "shop", requirement: "cert" };
const defaults = caCeiling("mesh-ca", undefined);

/** The message of the InvalidRequest `f` throws. */
function refusal(f: () => unknown): string {
  try {
    f();
  } catch (e) {
    expect(isMeshError(e, ErrorCodes.InvalidRequest)).toBe(true);
    return (e as Error).message;
  }
  throw new Error("expected a refusal");
}

describe("certificateRequest", () => {
  it("names each holding part under its module by default, for a server, for 24 h", () => {
    expect(certificateRequest(grant, ["web", "api"], undefined, "mesh-ca", defaults)).toEqual({
      dnsNames: ["web.shop.mesh", "api.shop.mesh"],
      ipAddresses: [],
      lifetimeMs: 24 * 3600_000,
      usage: "server",
    });
  });

  it("takes names, loopback addresses, a lifetime and a usage within the default ceiling", () => {
    const r = certificateRequest(
      grant,
      ["web"],
      { dnsNames: ["a.shop.mesh"], ipAddresses: ["127.0.0.1", "::1"], lifetime: "1h", usage: "both" },
      "mesh-ca",
      defaults,
    );
    expect(r).toEqual({ dnsNames: ["a.shop.mesh"], ipAddresses: ["127.0.0.1", "::1"], lifetimeMs: 3600_000, usage: "both" });
  });

  it("refuses a name of another module, a public name and a wildcard, naming the option that widens the ceiling", () => {
    expect(refusal(() => certificateRequest(grant, [], { dnsNames: "web.billing.mesh" }, "mesh-ca", defaults))).toMatch(
      /DNS name web\.billing\.mesh is outside what provider mesh-ca issues to module shop \(\*\.shop\.mesh\).*options\.allowDnsNames/,
    );
    expect(refusal(() => certificateRequest(grant, [], { dnsNames: ["example.com", "x.shop.mesh"] }, "mesh-ca", defaults))).toMatch(/example\.com is outside/);
    expect(refusal(() => certificateRequest(grant, [], { dnsNames: "*.shop.mesh" }, "mesh-ca", defaults))).toMatch(/no wildcards/);
  });

  it("refuses a public address by default, and takes it where the operator allows it for that module", () => {
    expect(refusal(() => certificateRequest(grant, [], { ipAddresses: "10.1.2.3" }, "mesh-ca", defaults))).toMatch(/10\.1\.2\.3 is outside .*allowIpAddresses/);
    const wider = caCeiling("mesh-ca", { allowIpAddresses: ["shop:10.0.0.0/8", "billing:[fd00::]/8", "fd01::/16"] });
    expect(certificateRequest(grant, ["web"], { ipAddresses: ["10.1.2.3", "fd01::5"] }, "mesh-ca", wider).ipAddresses).toEqual(["10.1.2.3", "fd01::5"]);
    expect(refusal(() => certificateRequest(grant, ["web"], { ipAddresses: "fd00::1" }, "mesh-ca", wider))).toMatch(/fd00::1 is outside/);
    expect(refusal(() => certificateRequest(grant, ["web"], { ipAddresses: "127.0.0.1" }, "mesh-ca", wider))).toMatch(/outside/);
  });

  it("scopes a name pattern to a module, and lets * stand for one label only", () => {
    const c = caCeiling("mesh-ca", { allowDnsNames: ["shop:*.shop.example.com", "*.{module}.mesh"] });
    expect(certificateRequest(grant, [], { dnsNames: ["www.shop.example.com", "web.shop.mesh"] }, "mesh-ca", c).dnsNames).toHaveLength(2);
    expect(refusal(() => certificateRequest(grant, [], { dnsNames: "a.b.shop.example.com" }, "mesh-ca", c))).toMatch(/outside/);
    expect(refusal(() => certificateRequest({ module: "billing", requirement: "cert" }, [], { dnsNames: "www.shop.example.com" }, "mesh-ca", c))).toMatch(
      /outside/,
    );
  });

  it("bounds the lifetime and the usage, and refuses unknown options and bad values", () => {
    expect(refusal(() => certificateRequest(grant, ["web"], { lifetime: "5s" }, "mesh-ca", defaults))).toMatch(/shorter than 10s/);
    expect(refusal(() => certificateRequest(grant, ["web"], { lifetime: "31d" }, "mesh-ca", defaults))).toMatch(
      /longer than provider mesh-ca allows \(30d\).*options\.maxLifetime/,
    );
    expect(refusal(() => certificateRequest(grant, ["web"], { lifetime: "soon" }, "mesh-ca", defaults))).toMatch(/must be a duration/);
    expect(refusal(() => certificateRequest(grant, ["web"], { usage: "signing" }, "mesh-ca", defaults))).toMatch(/one of server, client, both/);
    const serversOnly = caCeiling("mesh-ca", { allowUsages: "server" });
    expect(refusal(() => certificateRequest(grant, ["web"], { usage: "client" }, "mesh-ca", serversOnly))).toMatch(
      /usage client is not allowed by provider mesh-ca \(server\)/,
    );
    expect(refusal(() => certificateRequest(grant, ["web"], { subject: "x" }, "mesh-ca", defaults))).toMatch(/option subject is unknown/);
    expect(refusal(() => certificateRequest(grant, ["web"], { ipAddresses: "localhost" }, "mesh-ca", defaults))).toMatch(/not an IPv4 or IPv6 address/);
  });
});

describe("caCeiling", () => {
  it("refuses a malformed entry, naming the provider and the option", () => {
    expect(() => caCeiling("ca", { allowDnsNames: "a..b" })).toThrow(/provider ca: options\.allowDnsNames entry "a\.\.b"/);
    expect(() => caCeiling("ca", { allowIpAddresses: "10.0.0.0/33" })).toThrow(/options\.allowIpAddresses/);
    expect(() => caCeiling("ca", { maxLifetime: "1s" })).toThrow(/options\.maxLifetime/);
    expect(() => caCeiling("ca", { allowUsages: ["server", "any"] })).toThrow(/options\.allowUsages entry "any"/);
  });
});

describe("isDnsName", () => {
  it.each([
    ["web.shop.mesh", true],
    ["a-b.c", true],
    ["-a.c", false],
    ["A.c", false],
    ["a..c", false],
    ["*.c", false],
    [`${"a".repeat(64)}.c`, false],
  ])("%s → %s", (name, ok) => expect(isDnsName(name)).toBe(ok));
});
