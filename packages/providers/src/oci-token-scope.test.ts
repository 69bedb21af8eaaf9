import { describe, expect, it } from "vitest";
import { grantedAccess, hashPassword, inNamespace, isPasswordHash, ociNames, verifyPassword } from "./oci-token-scope.js";

describe("grantedAccess", () => {
  it.each([
    [
      "one repository of the namespace, pull and push",
      ["repository:shop/api:pull,push"],
      [{ type: "repository", name: "shop/api", actions: ["pull", "push"] }],
    ],
    ["a deeper path", ["repository:shop/tools/cli:pull"], [{ type: "repository", name: "shop/tools/cli", actions: ["pull"] }]],
    ["delete and * are narrowed away", ["repository:shop/api:delete,*,pull"], [{ type: "repository", name: "shop/api", actions: ["pull"] }]],
    ["only delete: nothing", ["repository:shop/api:delete"], []],
    ["another module", ["repository:bank/api:pull,push"], []],
    ["a look-alike prefix", ["repository:shopping/api:pull", "repository:shop-x/api:pull"], []],
    ["the namespace itself", ["repository:shop:pull"], []],
    ["the catalog", ["registry:catalog:*"], []],
    ["a malformed name", ["repository:shop/../bank/api:pull", "repository:shop/API:pull", "repository:shop//a:pull"], []],
    ["a host-qualified name", ["repository:evil:5000/shop/api:pull"], []],
    [
      "several scopes in one parameter, merged",
      ["repository:shop/a:pull repository:bank/b:pull", "repository:shop/a:push"],
      [{ type: "repository", name: "shop/a", actions: ["pull", "push"] }],
    ],
    ["no scope (a login)", [], []],
  ])("%s", (_what, scopes, expected) => {
    expect(grantedAccess(scopes, "shop")).toEqual(expected);
  });

  it("inNamespace holds names to the registry's length limit", () => {
    expect(inNamespace(`shop/${"a".repeat(250)}`, "shop")).toBe(true);
    expect(inNamespace(`shop/${"a".repeat(251)}`, "shop")).toBe(false);
  });
});

describe("ociNames", () => {
  it("are one-to-one over mesh names: the user joins module and requirement with a dot", () => {
    expect(ociNames("shop", "images")).toEqual({ user: "shop.images", mark: "shop/images", namespace: "shop" });
    expect(ociNames("a-b", "c").user).not.toBe(ociNames("a", "b-c").user);
  });
});

describe("password hashes", () => {
  it("verify the password they were made of and nothing else, salted afresh each time", async () => {
    const h1 = await hashPassword("correct horse");
    const h2 = await hashPassword("correct horse");
    expect(h1).not.toBe(h2);
    expect(isPasswordHash(h1)).toBe(true);
    expect(h1).not.toContain("correct horse");
    expect(await verifyPassword("correct horse", h1)).toBe(true);
    expect(await verifyPassword("correct horse", h2)).toBe(true);
    expect(await verifyPassword("correct horsf", h1)).toBe(false);
  });

  it("refuse anything but the cost this code makes, so a stored hash cannot make the issuer spend more", async () => {
    const h = await hashPassword("pw");
    expect(await verifyPassword("pw", h.replace("$16384$", "$1048576$"))).toBe(false);
    expect(await verifyPassword("pw", "plain")).toBe(false);
    expect(isPasswordHash("scrypt$1$2$3$x$y")).toBe(false);
    expect(isPasswordHash(42)).toBe(false);
  });
});
