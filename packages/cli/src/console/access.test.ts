import { describe, expect, it } from "vitest";
import { allowedHosts, checkListen, checkRequest, isLoopback, parseListen, type AccessPolicy } from "./access.js";
import { CliError } from "../cli-error.js";
import { ExitCodes } from "../exit-codes.js";

describe("parseListen and checkListen", () => {
  it.each([
    ["127.0.0.1:8470", "127.0.0.1", 8470],
    ["localhost:0", "localhost", 0],
    ["[::1]:9000", "::1", 9000],
    ["0.0.0.0:443", "0.0.0.0", 443],
  ])("parses %s", (spec, host, port) => {
    expect(parseListen(spec)).toEqual({ host, port });
  });

  it.each(["8470", "127.0.0.1", "::1:8470", "127.0.0.1:70000", "host:port"])("refuses %s as usage, with an example", (spec) => {
    const e = (() => {
      try {
        parseListen(spec);
      } catch (err) {
        return err as CliError;
      }
    })();
    expect(e).toBeInstanceOf(CliError);
    expect(e!.exitCode).toBe(ExitCodes.Usage);
    expect(e!.message).toContain("give HOST:PORT, e.g. 127.0.0.1:8470");
  });

  it.each([
    ["127.0.0.1", true],
    ["127.5.6.7", true],
    ["localhost", true],
    ["::1", true],
    ["0:0:0:0:0:0:0:1", true],
    ["0.0.0.0", false],
    ["192.168.1.4", false],
    ["::", false],
    ["example.org", false],
  ])("isLoopback(%s) is %s", (host, loop) => {
    expect(isLoopback(host)).toBe(loop);
  });

  it("listens beyond loopback only with TLS, and says how else to reach it", () => {
    expect(() => checkListen({ host: "127.0.0.1", port: 1 }, false)).not.toThrow();
    expect(() => checkListen({ host: "10.0.0.5", port: 1 }, true)).not.toThrow();
    expect(() => checkListen({ host: "10.0.0.5", port: 8470 }, false)).toThrow(/not a loopback address.*--tls-cert FILE and --tls-key FILE.*ssh -L/);
  });
});

describe("checkRequest", () => {
  const policy: AccessPolicy = { token: "s3cret-token", hosts: allowedHosts({ host: "127.0.0.1", port: 0 }, 8470), scheme: "http" };
  const ok = { method: "GET", host: "127.0.0.1:8470", origin: undefined, token: "s3cret-token" };

  it("answers a GET or HEAD with the token, on a loopback Host, with no Origin or its own", () => {
    expect(checkRequest(ok, policy)).toBeUndefined();
    expect(checkRequest({ ...ok, method: "HEAD" }, policy)).toBeUndefined();
    expect(checkRequest({ ...ok, host: "localhost:8470", origin: "http://localhost:8470" }, policy)).toBeUndefined();
    expect(checkRequest({ ...ok, host: "[::1]:8470" }, policy)).toBeUndefined();
  });

  it.each([
    ["no token", { token: null }, 401, "no token in this request: open the URL meshctl console printed"],
    ["a wrong token", { token: "s3cret-tokex" }, 401, "a wrong token"],
    ["a shorter token", { token: "s3cret" }, 401, "a wrong token"],
    ["a foreign Host", { host: "evil.example:8470" }, 421, 'does not serve the host "evil.example:8470"'],
    ["another port", { host: "127.0.0.1:8471" }, 421, "does not serve the host"],
    ["no Host", { host: undefined }, 421, "does not serve the host"],
    ["a foreign Origin", { origin: "http://evil.example" }, 403, "Origin http://evil.example"],
    ["an https Origin of the same host", { origin: "https://127.0.0.1:8470" }, 403, "another site"],
    ["Origin null", { origin: "null" }, 403, "opaque origin"],
    ["a POST", { method: "POST" }, 405, "read-only: POST is refused"],
  ])("refuses %s", (_what, over, status, words) => {
    const r = checkRequest({ ...ok, ...over }, policy);
    expect(r?.status).toBe(status);
    expect(r?.message).toContain(words);
  });

  it("beyond loopback, serves the address and the names given, never a wildcard", () => {
    expect([...allowedHosts({ host: "0.0.0.0", port: 443 }, 443, ["console.example.org"])]).toEqual(["console.example.org:443"]);
    expect([...allowedHosts({ host: "10.0.0.5", port: 443 }, 443)]).toEqual(["10.0.0.5:443"]);
  });
});
