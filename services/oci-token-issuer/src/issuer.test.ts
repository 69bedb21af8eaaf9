/**
 * The issuer's limit on failed logins, over HTTP against the real server (scrypt hashes, a
 * state directory of its own), with a clock the test moves: clients connect from different
 * loopback addresses (127.0.0.2, 127.0.0.3 …), which the issuer sees as different clients.
 */
import { request } from "node:http";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { hashPassword } from "@mesh/providers";
import { createLogger } from "@mesh/shared/service";
import { startTokenIssuer, type TokenIssuer } from "./issuer.js";

const SERVICE = "mesh-registry";
const ADMIN = { username: "mesh-admin", password: "admin-secret" };
const USER = { user: "shop.images", password: "correct horse battery staple" };

const dir = mkdtempSync(join(tmpdir(), "mesh-oci-limits-"));
let issuer: TokenIssuer;
let now = 1_000_000;

/** GET `path` from the issuer, connecting from `from`, as `auth` (HTTP Basic) if given. */
function get(
  path: string,
  from: string,
  auth?: { user: string; password: string },
): Promise<{ status: number; retryAfter?: string; body: { token?: string; errors?: Array<{ code: string; message: string }> } }> {
  const url = new URL(path, issuer.url);
  const headers: Record<string, string> = auth ? { authorization: `Basic ${Buffer.from(`${auth.user}:${auth.password}`).toString("base64")}` } : {};
  return new Promise((resolve, reject) => {
    const req = request(url, { localAddress: from, headers }, (res) => {
      let text = "";
      res.on("data", (d: Buffer) => (text += d.toString()));
      res.on("end", () =>
        resolve({ status: res.statusCode!, ...(res.headers["retry-after"] ? { retryAfter: res.headers["retry-after"] } : {}), body: JSON.parse(text || "{}") }),
      );
    });
    req.on("error", reject);
    req.end();
  });
}

const token = (from: string, auth: { user: string; password: string }) => get(`/token?service=${SERVICE}&scope=repository:shop/api:pull`, from, auth);

beforeAll(async () => {
  issuer = await startTokenIssuer({
    stateDir: dir,
    admin: ADMIN,
    service: SERVICE,
    issuer: "mesh-oci-token-issuer",
    log: createLogger("oci-token-issuer", { level: "silent" }),
    now: () => now,
  });
  const res = await fetch(`${issuer.url}/admin/users/${USER.user}/generations/1`, {
    method: "PUT",
    headers: { authorization: `Basic ${Buffer.from(`${ADMIN.username}:${ADMIN.password}`).toString("base64")}` },
    body: JSON.stringify({ hash: await hashPassword(USER.password) }),
  });
  expect(res.status).toBe(200);
});
afterAll(async () => {
  await issuer?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe("the token issuer's limit on failed logins", () => {
  it("answers an address 429 with Retry-After after 10 failures in a minute, its correct password too, while another address logs in", async () => {
    // Ten wrong logins from 127.0.0.2, under names of users that do not exist (so no user reaches its own limit of 5).
    for (let i = 0; i < 10; i++) expect((await token("127.0.0.2", { user: `guess.u${i}`, password: "wrong" })).status).toBe(401);
    now += 15_000;
    const locked = await token("127.0.0.2", { user: "guess.u10", password: "wrong" });
    expect(locked.status).toBe(429);
    expect(locked.retryAfter).toBe("45");
    expect(locked.body.errors?.[0]).toEqual({
      code: "TOOMANYREQUESTS",
      message:
        "too many failed logins from 127.0.0.2 (10 within 60 s): no password is checked from there until the window ends; try again in 45 s, with a current password of the grant",
    });
    // Locked is locked: the right password from there is not checked either.
    expect((await token("127.0.0.2", USER)).status).toBe(429);
    // Another address is not held by that one's failures.
    const other = await token("127.0.0.3", USER);
    expect(other.status).toBe(200);
    expect(other.body.token).toMatch(/^ey/);
    // Once the window has passed, the address may log in again.
    now += 45_000;
    expect((await token("127.0.0.2", USER)).status).toBe(200);
  });

  it("locks a user after 5 failures from any addresses, for every address, until the window passes; successes count for nothing", async () => {
    for (let i = 0; i < 20; i++) expect((await token("127.0.0.4", USER)).status).toBe(200);
    for (let i = 0; i < 5; i++) expect((await token(`127.0.1.${i + 1}`, { user: USER.user, password: `guess ${i}` })).status).toBe(401);
    const locked = await token("127.0.0.5", USER);
    expect(locked.status).toBe(429);
    expect(locked.retryAfter).toBe("60");
    expect(locked.body.errors?.[0]?.message).toMatch(/^too many failed logins as user shop\.images \(5 within 60 s\): .*try again in 60 s/);
    now += 60_000;
    expect((await token("127.0.0.5", USER)).status).toBe(200);
  });
});
