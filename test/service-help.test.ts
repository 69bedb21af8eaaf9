/**
 * Each built service answers `--help` with the environment it reads and `--version`, before it
 * connects or writes anything, refuses an argument it does not take (exit 2), and the services
 * reference names every variable the help lists.
 */
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { SERVICES, type ServiceName } from "@mesh/shared/service";

const repo = fileURLToPath(new URL("..", import.meta.url));
const cwd = mkdtempSync(join(tmpdir(), "mesh-service-help-"));
afterAll(() => rmSync(cwd, { recursive: true, force: true }));

const names = Object.keys(SERVICES) as ServiceName[];

/** The built service `name` with `args`, in an empty directory, pointed at a port where no NATS listens. */
const service = (name: ServiceName, args: string[]) =>
  new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    execFile(
      process.execPath,
      [join(repo, "services", name, "dist/main.js"), ...args],
      // A closed port and a state directory of the test's own: a service that started anyway would fail or write there.
      { cwd, env: { ...process.env, NATS_URL: "nats://127.0.0.1:1", MESH_OCI_ISSUER_STATE_DIR: join(cwd, "issuer") }, encoding: "utf8", timeout: 15_000 },
      (error, stdout, stderr) => resolve({ code: error ? (typeof error.code === "number" ? error.code : null) : 0, stdout, stderr }),
    );
  });

describe("a service's command line", () => {
  it.each(names)("mesh-%s --help lists every variable it reads and its exit codes, and starts nothing", async (name) => {
    const r = await service(name, ["--help"]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout.startsWith(`mesh-${name}: `)).toBe(true);
    for (const variable of Object.keys(SERVICES[name].environment)) expect(r.stdout, variable).toMatch(new RegExp(`^  ${variable} +\\S`, "m"));
    expect(r.stdout).toContain("Exit codes: 0 after SIGINT or SIGTERM");
    expect(readdirSync(cwd)).toEqual([]);
  });

  it.each(names)("mesh-%s --version prints the release's version; another argument is wrong usage", async (name) => {
    const version = (JSON.parse(readFileSync(join(repo, "services", name, "package.json"), "utf8")) as { version: string }).version;
    expect(await service(name, ["--version"])).toMatchObject({ code: 0, stdout: `${version}\n` });
    const wrong = await service(name, ["--frobnicate"]);
    expect(wrong.code).toBe(2);
    expect(wrong.stderr).toContain(`mesh-${name}: `);
    expect(wrong.stderr).toContain("--frobnicate");
    expect(readdirSync(cwd)).toEqual([]);
  });
});

describe("docs/reference/services.md", () => {
  it("names every variable a service's --help lists", () => {
    const page = readFileSync(join(repo, "docs/reference/services.md"), "utf8");
    for (const name of names) for (const variable of Object.keys(SERVICES[name].environment)) expect(page, `${name}: ${variable}`).toContain(`\`${variable}\``);
  });
});
