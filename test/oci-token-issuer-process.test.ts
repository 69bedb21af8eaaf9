/**
 * `mesh-oci-token-issuer` as an operator runs it: a process of its own that, on first start and
 * with nothing prepared, makes its signing key, the certificate the registry trusts and its admin
 * password file (mode 0600), serves /healthz, and keeps all three across a restart.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { freePort, waitForPort } from "./harness/ports.js";

const main = fileURLToPath(new URL("../services/oci-token-issuer/dist/main.js", import.meta.url));
const dir = mkdtempSync(join(tmpdir(), "mesh-oci-issuer-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function runIssuer(): Promise<{ url: string; stop(): Promise<number | null>; output(): string }> {
  const port = await freePort();
  let output = "";
  const child = spawn(process.execPath, [main], {
    env: { ...process.env, MESH_OCI_ISSUER_LISTEN: `127.0.0.1:${port}`, MESH_OCI_ISSUER_STATE_DIR: dir },
    stdio: ["ignore", "pipe", "pipe"],
  });
  child.stdout.on("data", (d: Buffer) => (output += d.toString()));
  child.stderr.on("data", (d: Buffer) => (output += d.toString()));
  await waitForPort(port, 15_000);
  return {
    url: `http://127.0.0.1:${port}`,
    output: () => output,
    stop: () => new Promise((resolve) => (child.once("exit", (code) => resolve(code)), child.kill("SIGTERM"))),
  };
}

describe("mesh-oci-token-issuer, the process", () => {
  it("starts with nothing prepared, makes its key, certificate and admin password, and keeps them across a restart", async () => {
    const first = await runIssuer();
    expect((await fetch(`${first.url}/healthz`)).status).toBe(200);
    const password = readFileSync(join(dir, "admin-password"), "utf8");
    const cert = readFileSync(join(dir, "signing-cert.pem"), "utf8");
    expect(cert).toContain("BEGIN CERTIFICATE");
    for (const f of ["admin-password", "signing-key.pem"]) expect(statSync(join(dir, f)).mode & 0o077).toBe(0);
    // The realm and certificate are logged, for the registry's config; the admin password never.
    expect(first.output()).toContain("signing-cert.pem");
    expect(first.output()).not.toContain(password.trim());
    expect(await first.stop()).toBe(0);

    const second = await runIssuer();
    expect(readFileSync(join(dir, "admin-password"), "utf8")).toBe(password);
    expect(readFileSync(join(dir, "signing-cert.pem"), "utf8")).toBe(cert);
    const auth = `Basic ${Buffer.from(`mesh-admin:${password.trim()}`).toString("base64")}`;
    expect((await fetch(`${second.url}/admin/users/shop.images`, { headers: { authorization: auth } })).status).toBe(404);
    expect((await fetch(`${second.url}/admin/users/shop.images`, { headers: { authorization: "Basic eDp5" } })).status).toBe(401);
    expect(await second.stop()).toBe(0);
  });
});
