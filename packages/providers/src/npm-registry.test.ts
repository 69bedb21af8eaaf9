import { createRequire } from "node:module";
import { describe, expect, it } from "vitest";
import { ErrorCodes, isMeshError } from "@mesh/shared";
import { createNpmRegistryAdapter, npmNames, npmPasswordHash, npmrcOf, NPM_USER_NAME } from "./npm-registry.js";

/** The mesh's Verdaccio plugin, whose hash check must accept what the adapter writes. */
const plugin = createRequire(import.meta.url)("../../../deploy/verdaccio/plugins/verdaccio-mesh-scopes/index.js") as {
  matches(hash: string, password: string): boolean;
};

describe("npmNames", () => {
  it.each([
    ["shop", "pkgs", "@shop", ["shop_pkgs_a", "shop_pkgs_b"]],
    ["my-shop", "front-end", "@my-shop", ["my__shop_front_end_a", "my__shop_front_end_b"]],
  ])("%s/%s → scope %s, users %j", (module, requirement, scope, users) => {
    expect(npmNames(module, requirement)).toEqual({ scope, users });
  });

  it("makes only names the plugin accepts, for the longest mesh names", () => {
    const long = "a".repeat(40);
    for (const u of npmNames(long, long).users) expect(u).toMatch(NPM_USER_NAME);
  });
});

describe("npmPasswordHash", () => {
  it("is what the plugin verifies: the password matches, another does not, and the salt is fresh each time", () => {
    const h = npmPasswordHash("s3cret-password");
    expect(h).toMatch(/^sha256\$[0-9a-f]{8}\$[0-9a-f]{64}$/);
    expect(h).not.toContain("s3cret");
    expect(plugin.matches(h, "s3cret-password")).toBe(true);
    expect(plugin.matches(h, "s3cret-passwordx")).toBe(false);
    expect(plugin.matches("garbage", "s3cret-password")).toBe(false);
    expect(npmPasswordHash("s3cret-password")).not.toBe(h);
    expect(npmPasswordHash("p", Buffer.from("00000000", "hex"))).toBe(npmPasswordHash("p", Buffer.from("00000000", "hex")));
  });
});

describe("npmrcOf", () => {
  it("routes the scope to the registry and sends Basic auth to that registry only", () => {
    expect(npmrcOf("@shop", "https://npm.example:8443/prefix/", "dXNlcjpwYXNz")).toBe(
      "@shop:registry=https://npm.example:8443/prefix/\n//npm.example:8443/prefix/:_auth=dXNlcjpwYXNz\n",
    );
  });
});

describe("createNpmRegistryAdapter", () => {
  const provider = { name: "npm-main", node: "node-a", endpoint: "http://127.0.0.1:4873", options: { usersDir: "/var/lib/mesh/verdaccio-users" } };

  it.each([
    ["postgres://127.0.0.1:5432", /http:\/\/ or https:\/\//],
    ["http://user:pw@127.0.0.1:4873", /holds a user or password/],
  ])("refuses endpoint %s", (endpoint, message) => {
    expect(() => createNpmRegistryAdapter({ ...provider, endpoint })).toThrow(message);
  });

  it.each([
    [{}, "options.usersDir is not set"],
    [{ usersDir: "relative/dir" }, "is not an absolute path"],
    [{ usersDir: ["/a", "/b"] }, "is a list"],
    [{ usersDir: "/a", managementUrl: "http://x" }, 'unknown option "managementUrl"'],
  ])("makes a login-only adapter for options %j, whose admin verbs say what to set", async (options, message) => {
    const adapter = createNpmRegistryAdapter({ ...provider, options });
    const e = await adapter.observe({ grant: { module: "shop", requirement: "pkgs", generation: 1 } }).catch((err: unknown) => err);
    expect(isMeshError(e, ErrorCodes.ProviderMisconfigured)).toBe(true);
    expect((e as Error).message).toContain(message);
  });
});
