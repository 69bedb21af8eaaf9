/**
 * A release as an operator installs it, as real processes: `npm run release`, its SHA256SUMS
 * checked by `sha256sum -c`, then
 *
 * - the npm package installed with `npm install -g --omit=dev` into an empty prefix, and its
 *   `meshctl` run from an empty directory outside the repository: `--version`, `example shop`,
 *   and `up` with the files that wrote, until shop is Ready, its services the package's;
 * - the single-file bundles alone (copied from the bundles' archive into an empty directory),
 *   run with `node` and nothing else: the same.
 *
 * - the SDK's package installed with `npm install` into an empty project: it brings none of the
 *   mesh's private workspaces, a file written against its types type-checks (and a wrong call
 *   does not), and a program imports it and talks to a nats-server with it.
 *
 * `up` starts its own nats-server (the machine's shared one holds 4222, so on a free port) and
 * provisions shop's database on the machine's PostgreSQL, as test/up.test.ts does: the shop_*
 * databases and roles there are dropped before and after each run.
 */
import { execFile, spawn } from "node:child_process";
import { copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { dropFromSharedPostgres, holdSharedPostgresNames } from "./harness/postgres.js";
import { waitFor } from "./harness/wait.js";
import { startNatsServer } from "./harness/nats-server.js";

const run = promisify(execFile);
const repo = fileURLToPath(new URL("..", import.meta.url));
const releaseDir = join(repo, "dist-release");
const version = (JSON.parse(readFileSync(join(repo, "packages/cli/package.json"), "utf8")) as { version: string }).version;
const SERVICES = ["resolver", "provisioner", "verifier", "rotator", "agent"];

/**
 * A new user's shell: no NATS address or identity of the mesh's, no module search path of
 * Node's, and node on the PATH (the bins' `#!/usr/bin/env node`), after `path` when given.
 */
const userEnv = (path = "") => ({
  ...process.env,
  NODE_PATH: "",
  PATH: [path, dirname(process.execPath), process.env.PATH].filter(Boolean).join(delimiter),
  NATS_URL: "",
  MESH_NATS_CREDENTIALS: "",
  MESH_NATS_USER: "",
  MESH_MASTER_KEY: "",
  MESH_MASTER_KEY_FILE: "",
});

const dirs: string[] = [];
/** A new empty directory outside the repository, removed at the end. */
function emptyDir(what: string): string {
  const d = mkdtempSync(join(tmpdir(), `mesh-release-${what}-`));
  dirs.push(d);
  return d;
}

/** Runs a command to its end; its exit code and output, never a rejection. */
async function runTo(cmd: string, args: string[], cwd: string, env: NodeJS.ProcessEnv): Promise<{ code: number; out: string }> {
  try {
    const { stdout, stderr } = await run(cmd, args, { cwd, env, timeout: 120_000 });
    return { code: 0, out: stdout + stderr };
  } catch (e) {
    const err = e as { code?: number; stdout?: string; stderr?: string; message: string };
    return { code: typeof err.code === "number" ? err.code : 1, out: `${err.stdout ?? ""}${err.stderr ?? ""}${err.message}` };
  }
}

/** The command lines of the processes that run in directory `cwd` (meshctl up and what it started there). */
function commandLinesIn(cwd: string): string[] {
  const lines: string[] = [];
  for (const pid of readdirSync("/proc").filter((p) => /^\d+$/.test(p))) {
    try {
      if (realpathSync(`/proc/${pid}/cwd`) === realpathSync(cwd)) lines.push(readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").join(" "));
    } catch {
      // gone meanwhile, or another user's
    }
  }
  return lines;
}

type Meshctl = { cmd: string; args: string[] };

/**
 * `meshctl example shop`, then `meshctl up` with the files it wrote, in `cwd`, until shop is
 * Ready; checks that every service runs from `programsDir`, runs `whileReady`, then sends
 * `up` SIGINT.
 */
async function exampleShopUntilReady(
  meshctl: Meshctl,
  cwd: string,
  env: NodeJS.ProcessEnv,
  programsDir: string,
  whileReady?: () => Promise<void>,
): Promise<void> {
  const example = await runTo(meshctl.cmd, [...meshctl.args, "example", "shop"], cwd, env);
  expect(example.code, example.out).toBe(0);
  expect(example.out).toContain("wrote providers/postgres.yaml\nwrote shop.yaml\n");
  expect(example.out).toContain("next: meshctl up -f providers/postgres.yaml -f shop.yaml\n");

  // test/up.test.ts runs the same example on the same server: each waits for the other.
  const release = await holdSharedPostgresNames("shop");
  await dropFromSharedPostgres("shop");
  const up = spawn(meshctl.cmd, [...meshctl.args, "up", "-f", "providers/postgres.yaml", "-f", "shop.yaml"], { cwd, env, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  up.stdout.on("data", (d: Buffer) => (out += d.toString()));
  up.stderr.on("data", (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((resolve) => up.once("exit", (code) => resolve(code)));
  try {
    await waitFor("shop Ready in up's output", () => /\bshop Ready\b/.test(out), 150_000).catch((e: Error) => {
      throw new Error(`${e.message}\n--- up printed:\n${out}`);
    });
    expect(out).toMatch(/starting a NATS server whose operator is the mesh/);
    expect(existsSync(join(cwd, ".mesh/bindings/node-a/shop/api/db/uri"))).toBe(true);
    // The services are the release's programs, none of the repository's.
    const lines = commandLinesIn(cwd);
    for (const s of SERVICES)
      expect(
        lines.some((l) => l.includes(join(programsDir, `mesh-${s}.mjs`))),
        `${s} running from ${programsDir}`,
      ).toBe(true);
    expect(lines.filter((l) => l.includes(repo))).toEqual([]);
    await whileReady?.();
    up.kill("SIGINT");
    expect(await exited, out).toBe(0);
    expect(out).toMatch(/stopped nats-server/);
  } finally {
    if (up.exitCode === null && up.signalCode === null) up.kill("SIGKILL");
    await dropFromSharedPostgres("shop");
    release();
  }
}

/** `meshctl console` in `cwd`: its page shows shop, and its assets are the repository's, from inside the bundle. */
async function consoleServesItsAssets(meshctl: Meshctl, cwd: string, env: NodeJS.ProcessEnv): Promise<void> {
  const consoleProc = spawn(meshctl.cmd, [...meshctl.args, "console", "--listen", "127.0.0.1:0"], { cwd, env, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  consoleProc.stdout.on("data", (d: Buffer) => (out += d.toString()));
  consoleProc.stderr.on("data", (d: Buffer) => (out += d.toString()));
  try {
    const url = new URL(
      await waitFor("the console to print its URL", () => /^(http:\/\/127\.0\.0\.1:\d+\/\?token=[\w-]+)\n/.exec(out)?.[1], 30_000).catch((e: Error) => {
        throw new Error(`${e.message}\n--- meshctl console printed:\n${out}`);
      }),
    );
    const page = await fetch(url);
    expect(page.status).toBe(200);
    expect(await page.text()).toContain("shop");
    for (const asset of ["console.js", "console.css"]) {
      const got = await fetch(new URL(`/assets/${asset}?${url.searchParams}`, url));
      expect(got.status, asset).toBe(200);
      expect(await got.text()).toBe(readFileSync(join(repo, "packages/cli/assets", asset), "utf8"));
    }
  } finally {
    const exited = new Promise((resolve) => consoleProc.once("exit", resolve));
    consoleProc.kill("SIGTERM");
    await exited;
  }
}

describe("a release, as an operator installs it", () => {
  beforeAll(async () => {
    const release = await runTo("npm", ["run", "release"], repo, process.env);
    expect(release.code, release.out).toBe(0);
  }, 180_000);

  afterAll(() => {
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });

  it("names its artifacts by version in SHA256SUMS, which sha256sum -c verifies", async () => {
    const check = await runTo("sha256sum", ["-c", "SHA256SUMS"], releaseDir, process.env);
    expect(check.code, check.out).toBe(0);
    expect(check.out).toBe(`mesh-meshctl-${version}.tgz: OK\nmesh-bundles-${version}.tar.gz: OK\nmesh-client-${version}.tgz: OK\n`);
  });

  describe("the npm package, installed with npm into an empty prefix", () => {
    let prefix: string;
    beforeAll(async () => {
      prefix = emptyDir("prefix");
      const install = await runTo(
        "npm",
        ["install", "-g", "--omit=dev", "--prefix", prefix, join(releaseDir, `mesh-meshctl-${version}.tgz`)],
        prefix,
        userEnv(),
      );
      expect(install.code, install.out).toBe(0);
    }, 120_000);

    it("puts meshctl and each service on the PATH, with nothing else installed, and meshctl prints the release's version", async () => {
      for (const b of ["meshctl", ...SERVICES.map((s) => `mesh-${s}`), "mesh-oci-token-issuer"]) expect(existsSync(join(prefix, "bin", b)), b).toBe(true);
      expect(existsSync(join(prefix, "lib/node_modules/@mesh/meshctl/node_modules"))).toBe(false);
      const v = await runTo("meshctl", ["--version"], emptyDir("cwd"), userEnv(join(prefix, "bin")));
      expect(v).toEqual({ code: 0, out: `${version}\n` });
    });

    it("writes the shop example and runs it with meshctl up until shop is Ready, from an empty directory", { timeout: 480_000 }, async () => {
      await exampleShopUntilReady({ cmd: "meshctl", args: [] }, emptyDir("cwd"), userEnv(join(prefix, "bin")), join(prefix, "lib/node_modules/@mesh/meshctl"));
    });
  });

  describe("the single-file bundles, run with node alone", () => {
    let programs: string;
    beforeAll(async () => {
      const unpacked = emptyDir("unpacked");
      const tar = await runTo("tar", ["-xzf", join(releaseDir, `mesh-bundles-${version}.tar.gz`), "-C", unpacked], unpacked, process.env);
      expect(tar.code, tar.out).toBe(0);
      // Only the programs, in a directory of their own: nothing else beside them, no node_modules above.
      programs = emptyDir("programs");
      const files = readdirSync(join(unpacked, `mesh-${version}`)).filter((f) => f.endsWith(".mjs"));
      expect(files.sort()).toEqual([
        "mesh-agent.mjs",
        "mesh-oci-token-issuer.mjs",
        "mesh-provisioner.mjs",
        "mesh-resolver.mjs",
        "mesh-rotator.mjs",
        "mesh-verifier.mjs",
        "meshctl.mjs",
      ]);
      for (const f of files) copyFileSync(join(unpacked, `mesh-${version}`, f), join(programs, f));
    });

    it("prints the release's version", async () => {
      const v = await runTo(process.execPath, [join(programs, "meshctl.mjs"), "--version"], emptyDir("cwd"), userEnv());
      expect(v).toEqual({ code: 0, out: `${version}\n` });
    });

    it("writes the shop example and runs it with meshctl up until shop is Ready; its console serves the assets it carries", { timeout: 480_000 }, async () => {
      const meshctl = { cmd: process.execPath, args: [join(programs, "meshctl.mjs")] };
      const cwd = emptyDir("cwd");
      await exampleShopUntilReady(meshctl, cwd, userEnv(), programs, () => consoleServesItsAssets(meshctl, cwd, userEnv()));
    });
  });
  describe("the SDK's package, installed with npm into an empty project", () => {
    let project: string;
    beforeAll(async () => {
      project = emptyDir("sdk");
      writeFileSync(join(project, "package.json"), JSON.stringify({ name: "uses-the-sdk", private: true, type: "module" }));
      const install = await runTo(
        "npm",
        ["install", "--omit=dev", "--no-audit", "--no-fund", join(releaseDir, `mesh-client-${version}.tgz`)],
        project,
        userEnv(),
      );
      expect(install.code, install.out).toBe(0);
    }, 120_000);

    it("brings its third-party dependencies and nothing of the mesh's private workspaces", () => {
      const installed = JSON.parse(readFileSync(join(project, "node_modules/@mesh/client/package.json"), "utf8")) as {
        dependencies: Record<string, string>;
        private?: boolean;
      };
      expect(installed.private).toBeUndefined();
      expect(Object.keys(installed.dependencies)).toContain("@nats-io/transport-node");
      expect(Object.keys(installed.dependencies).filter((d) => d.startsWith("@mesh/") || d === "pino")).toEqual([]);
      expect(readdirSync(join(project, "node_modules/@mesh"))).toEqual(["client"]);
      expect(existsSync(join(project, "node_modules/pino"))).toBe(false);
    });

    it("type-checks a module written against it, and refuses a wrong call", async () => {
      writeFileSync(
        join(project, "tsconfig.json"),
        JSON.stringify({
          compilerOptions: {
            module: "NodeNext",
            moduleResolution: "NodeNext",
            target: "ES2022",
            strict: true,
            noEmit: true,
            // The package's own declarations are checked too, not only their use.
            skipLibCheck: false,
            types: ["node"],
            typeRoots: [join(repo, "node_modules/@types")],
          },
          include: ["app.ts"],
        }),
      );
      writeFileSync(
        join(project, "app.ts"),
        [
          'import { connect } from "@nats-io/transport-node";',
          'import { declare, holdCredential, isMeshError, registerTracing, type Declared, type HeldCredential } from "@mesh/client";',
          "export async function run(): Promise<number> {",
          '  const nc = await connect({ servers: "127.0.0.1:4222" });',
          '  const declared: Declared = await declare(nc, [{ kind: "Module", name: "shop", parts: [{ name: "api", node: "node-a" }], requires: [] }]);',
          '  const holder = await holdCredential(nc, { module: "shop", part: "api", node: "node-a", requirement: "db" });',
          "  for await (const held of holder) {",
          "    const h: HeldCredential = held;",
          "    await h.confirm();",
          "    return h.generation;",
          "  }",
          "  // @ts-expect-error a holder needs its module, part, node and requirement",
          '  await holdCredential(nc, { module: "shop" });',
          "  return declared.accepted.length + (isMeshError(undefined) ? 1 : 0) + (registerTracing.length > 0 ? 0 : 1);",
          "}",
          "",
        ].join("\n"),
      );
      const tsc = await runTo(process.execPath, [join(repo, "node_modules/typescript/bin/tsc"), "-p", "tsconfig.json"], project, userEnv());
      expect(tsc, "tsc against the installed package").toEqual({ code: 0, out: "" });
    });

    it("runs: a program imports it and asks a nats-server with it", async () => {
      const nats = await startNatsServer();
      try {
        writeFileSync(
          join(project, "run.mjs"),
          [
            'import { connect } from "@nats-io/transport-node";',
            'import { declare, isMeshError } from "@mesh/client";',
            "const nc = await connect({ servers: process.argv[2] });",
            "const codes = [];",
            "// Text: loads the YAML parser, which rejects it before anything is sent.",
            'for (const manifest of ["kind: Module\\nname: Bad_Name\\n", [{ kind: "Module", name: "shop", parts: [], requires: [] }]])',
            "  await declare(nc, manifest, { timeoutMs: 500 }).catch((e) => codes.push(isMeshError(e) ? e.code : String(e)));",
            "await nc.close();",
            "console.log(codes.join(' '));",
            "",
          ].join("\n"),
        );
        const ran = await runTo(process.execPath, ["run.mjs", nats.url], project, userEnv());
        // Refused here, then no resolver to answer on that server.
        expect(ran).toEqual({ code: 0, out: "InvalidManifest Unavailable\n" });
      } finally {
        await nats.stop();
      }
    });
  });
});
