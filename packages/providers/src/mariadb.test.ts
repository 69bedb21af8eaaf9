import { describe, expect, it } from "vitest";
import { ErrorCodes, isMeshError } from "@mesh/shared";
import { createMariadbAdapter, nativePasswordHash } from "./mariadb.js";

const provider = (endpoint: string) => ({ name: "maria", node: "node-a", endpoint, admin: { username: "root" } });

describe("nativePasswordHash", () => {
  it.each([
    // SELECT PASSWORD('…') on MariaDB 10.11
    ["pw-123", "*742A3DC1F80EA78FBF67DD8912D705EBCC69CA25"],
    ["adm-pw", "*AB266EBB129FB9DFD5FC16207EBB74A073C8A0D4"],
  ])("%s → %s, as PASSWORD() gives it", (password, hash) => {
    expect(nativePasswordHash(password)).toBe(hash);
  });
});

describe("the endpoint", () => {
  it.each(["mysql://127.0.0.1:3306", "mariadb://db.example:3307", "mysql://[::1]", "mysql://127.0.0.1:3306/"])("accepts %s", async (endpoint) => {
    await createMariadbAdapter(provider(endpoint)).close();
  });

  it.each([
    ["postgres://127.0.0.1:5432", /not a mysql:\/\/ or mariadb:\/\/ URL/],
    ["127.0.0.1:3306", /not a mysql:\/\/ or mariadb:\/\/ URL|not a URL/],
    ["mysql://127.0.0.1:3306/shop", /names a database/],
    ["mysql://", /names no host|not a URL/],
  ])("refuses %s as ProviderMisconfigured", (endpoint, why) => {
    let err: unknown;
    try {
      createMariadbAdapter(provider(endpoint));
    } catch (e) {
      err = e;
    }
    expect(isMeshError(err, ErrorCodes.ProviderMisconfigured), String(err)).toBe(true);
    expect((err as Error).message).toMatch(why);
    expect((err as Error).message).toMatch(/such as mysql:\/\/127\.0\.0\.1:3306/);
  });

  it("refuses a password in the endpoint without repeating it", () => {
    let err: unknown;
    try {
      createMariadbAdapter(provider("mysql://root:s3cret-pw@127.0.0.1:3306"));
    } catch (e) {
      err = e;
    }
    expect(isMeshError(err, ErrorCodes.ProviderMisconfigured)).toBe(true);
    expect((err as Error).message).toMatch(/admin\.passwordEnv or admin\.passwordFile/);
    expect((err as Error).message).not.toContain("s3cret-pw");
  });
});
