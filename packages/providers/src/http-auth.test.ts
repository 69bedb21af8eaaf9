import { describe, expect, it } from "vitest";
import { basicAuthorization, parseBearerChallenge } from "./http-auth.js";

describe("parseBearerChallenge", () => {
  it("reads realm, service and scope, whatever the case of the scheme and the parameter names", () => {
    expect(parseBearerChallenge('Bearer realm="http://127.0.0.1:5001/token",service="registry",scope="repository:mesh/app:pull,push"')).toEqual({
      realm: "http://127.0.0.1:5001/token",
      service: "registry",
      scope: "repository:mesh/app:pull,push",
    });
    expect(parseBearerChallenge('bearer Realm="https://issuer.example/t",SERVICE="r"')).toEqual({ realm: "https://issuer.example/t", service: "r" });
  });

  it("refuses what is not a usable Bearer challenge", () => {
    expect(parseBearerChallenge("")).toBeUndefined();
    expect(parseBearerChallenge('Basic realm="x"')).toBeUndefined();
    expect(parseBearerChallenge('Bearer service="registry"')).toBeUndefined();
    expect(parseBearerChallenge('Bearer realm="http://127.0.0.1/token"')).toBeUndefined();
    expect(parseBearerChallenge('Bearer realm="not a url",service="registry"')).toBeUndefined();
  });
});

describe("basicAuthorization", () => {
  it("is RFC 7617's user:password in base64", () => {
    expect(basicAuthorization("Aladdin", "open sesame")).toBe("Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==");
  });
});
