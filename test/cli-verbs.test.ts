/**
 * The operator's verbs against a whole mesh on its own nats-server (resolver, provisioner, an
 * agent on node-a): `apply -f DIR --wait` settles what it applied, failing at once on
 * Unsatisfiable and with exit 9 when time runs out; `get modules|grants|providers` lists them;
 * `wait` ends when the state comes (for a module applied meanwhile too), with exit 9 naming the
 * state seen last, or 3 for a module that still has none; the built meshctl wires it all and
 * prints its package's version.
 */
import { execFile, spawn, spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse as parseYaml } from "yaml";
import { ModuleStates, type ModuleDoc } from "@mesh/shared";
import { ExitCodes, bufferOutput, modulesRevisionNow, runApply, runGet, runWait, type ApplyOptions, type BufferedOutput } from "../packages/cli/src/index.js";
import { connectNats, openStore } from "@mesh/shared/runtime";
import { startTestMesh, type TestMesh } from "./mesh.js";
import { exitOf } from "./harness/cli-exit.js";
import { waitFor } from "./harness/wait.js";

const repo = fileURLToPath(new URL("..", import.meta.url));
const dir = mkdtempSync(join(tmpdir(), "meshctl-verbs-"));
let mesh: TestMesh;

function write(path: string, text: string): string {
  writeFileSync(path, text);
  return path;
}

/** `apply` with `--wait --timeout timeoutMs`, as meshctl wires it. */
function applyWaiting(files: string[], out: BufferedOutput, timeoutMs: number, json = false): Promise<number> {
  const wait: ApplyOptions["wait"] = { untilMs: Date.now() + timeoutMs, timeoutMs, store: async () => mesh.store };
  return runApply(async () => mesh.nc, { files, json, wait }, out);
}

/** The built meshctl, run without blocking: the services it talks to run in this process. */
const meshctl = (args: string[]) =>
  new Promise<{ status: number | null; stdout: string; stderr: string }>((resolve) => {
    execFile(
      process.execPath,
      [join(repo, "packages/cli/bin/meshctl.js"), ...args],
      { env: { ...process.env, NO_COLOR: "1", NATS_URL: mesh.nats.url }, encoding: "utf8", timeout: 30_000 },
      (error, stdout, stderr) => resolve({ status: error ? (typeof error.code === "number" ? error.code : null) : 0, stdout, stderr }),
    );
  });

/** The modules the get, wait and built-meshctl tests read, one in each state they show. */
const FIXTURES: ModuleDoc[] = [
  { kind: "Module", name: "site", parts: [{ name: "web", node: "node-a", installed: true }], requires: [] },
  { kind: "Module", name: "shop", parts: [{ name: "api", node: "node-a", installed: true }], requires: [{ name: "key", kind: "secret" }] },
  // No provider serves postgres.database here.
  { kind: "Module", name: "needs-pg", parts: [{ name: "api", node: "node-a", installed: true }], requires: [{ name: "db", kind: "postgres.database" }] },
  // No agent runs on node-z: the secret is provisioned, never delivered.
  { kind: "Module", name: "far", parts: [{ name: "api", node: "node-z", installed: true }], requires: [{ name: "key", kind: "secret" }] },
];
const FIXTURE_NAMES = FIXTURES.map((m) => m.name).sort();

beforeAll(async () => {
  mesh = await startTestMesh({ nodes: ["node-a"] });
  expect((await mesh.apply(FIXTURES)).ok).toBe(true);
  await mesh.waitForState("site", "NothingRequired");
  await mesh.waitForState("shop", "Ready");
  await mesh.waitForState("needs-pg", "Unsatisfiable");
  await waitFor("far/key provisioned", async () => ((await mesh.grant("far", "key"))?.generation ?? 0) >= 1);
});

afterAll(async () => {
  await mesh?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe("meshctl apply -f DIR --wait", () => {
  it("applies every .yaml and .yml of the directory, then waits until each module is settled", async () => {
    const manifests = join(dir, "manifests");
    mkdirSync(manifests);
    write(join(manifests, "a-site.yaml"), "kind: Module\nname: dir-site\nparts: [{ name: web, node: node-a }]\n");
    write(join(manifests, "b-shop.yml"), "kind: Module\nname: dir-shop\nparts: [{ name: api, node: node-a }]\nrequires: [{ name: key, kind: secret }]\n");
    write(join(manifests, "README.md"), "not a manifest");
    const out = bufferOutput();
    expect(await applyWaiting([manifests], out, 20_000)).toBe(ExitCodes.Ok);
    expect(out.stderr).toBe("");
    expect(out.stdout).toContain("module/dir-site created\nmodule/dir-shop created\n");
    expect(out.stdout).toMatch(/\d\d:\d\d:\d\d dir-shop /);
    expect(out.stdout).toMatch(/\ndir-site NothingRequired: the module declares no requirement\ndir-shop Ready: all requirements are satisfied\n$/);
    expect((await mesh.moduleStatus("dir-shop"))?.state).toBe("Ready");

    // Applied again, nothing changes: the states of the stored manifests are the answer at once.
    const again = bufferOutput();
    expect(await applyWaiting([manifests], again, 20_000, true)).toBe(ExitCodes.Ok);
    const body = JSON.parse(again.stdout) as { ok: boolean; accepted: unknown[]; wait: { outcome: string; modules: Array<Record<string, unknown>> } };
    expect(body.accepted).toEqual([
      { kind: "Module", name: "dir-site", action: "unchanged" },
      { kind: "Module", name: "dir-shop", action: "unchanged" },
    ]);
    expect(body.wait.outcome).toBe("settled");
    expect(body.wait.modules.map((m) => [m.module, m.outcome, m.state])).toEqual([
      ["dir-site", "met", "NothingRequired"],
      ["dir-shop", "met", "Ready"],
    ]);
  });

  it("fails at once, with the reason, when a module applied is Unsatisfiable", async () => {
    // What tells a record written by this apply from an older one: the bucket's revision, read before sending.
    const before = await modulesRevisionNow(mesh.store);
    expect(before).toBeGreaterThan(0);
    const file = write(
      join(dir, "apply-pg.yaml"),
      "kind: Module\nname: apply-pg\nparts: [{ name: api, node: node-a }]\nrequires: [{ name: db, kind: postgres.database }]\n",
    );
    const out = bufferOutput();
    const started = Date.now();
    expect(await applyWaiting([file], out, 30_000)).toBe(ExitCodes.Failure);
    expect(Date.now() - started).toBeLessThan(15_000);
    expect(out.stdout).toContain("module/apply-pg created");
    expect(out.stderr).toContain("meshctl: apply-pg Unsatisfiable: db: NoProvider");
    expect(out.stderr).toContain("meshctl explain apply-pg says what would satisfy it");
    expect((await mesh.store.kv.modules.get("apply-pg"))!.revision).toBeGreaterThan(before);
  });

  it("exits 9 when a module is not settled in time, naming what it was seen in", async () => {
    // No agent runs on node-z: the secret is provisioned, never delivered.
    const file = write(
      join(dir, "apply-far.yaml"),
      "kind: Module\nname: apply-far\nparts: [{ name: api, node: node-z }]\nrequires: [{ name: key, kind: secret }]\n",
    );
    const out = bufferOutput();
    expect(await applyWaiting([file], out, 5_000)).toBe(ExitCodes.WaitTimedOut);
    expect(out.stderr.replace(/\s+/g, " ")).toMatch(
      /meshctl: apply-far is not settled \(Ready or NothingRequired\) after 5\.0 s \(--timeout\): last seen Pending: waiting for key/,
    );
  });

  it("refuses a directory with no manifest, saying so, and sends nothing", async () => {
    const empty = join(dir, "empty");
    mkdirSync(empty);
    const out = bufferOutput();
    let connected = false;
    expect(await runApply(async () => ((connected = true), mesh.nc), { files: [empty] }, out)).toBe(ExitCodes.Failure);
    expect(connected).toBe(false);
    expect(out.stderr).toContain(`${empty}: is a directory with no .yaml or .yml file directly in it`);
  });
});

/** `meshctl get RESOURCE --json`, parsed. */
async function runGetJson(resource: "grants"): Promise<{ grants: Array<Record<string, unknown>> }> {
  const out = bufferOutput();
  expect(await runGet(mesh.store, { resource, json: true }, out)).toBe(ExitCodes.Ok);
  return JSON.parse(out.stdout) as { grants: Array<Record<string, unknown>> };
}

describe("meshctl get", () => {
  it("get modules: an aligned table, --json with a stable shape, exit 3 for a module never processed", async () => {
    const out = bufferOutput();
    expect(await runGet(mesh.store, { resource: "modules" }, out)).toBe(ExitCodes.Ok);
    const lines = out.stdout.trimEnd().split("\n");
    expect(lines[0]).toMatch(/^NAME +STATE +READY +SINCE +REASON$/);
    const col = lines[0]!.indexOf("STATE");
    const names = lines.slice(1).map((l) => l.slice(0, col).trim());
    expect(names).toEqual([...names].sort());
    expect(names.filter((n) => FIXTURE_NAMES.includes(n))).toEqual(FIXTURE_NAMES);
    expect(lines.find((l) => l.startsWith("shop"))).toMatch(/^shop +Ready +1\/1 +\d+ s ago +all requirements are satisfied$/);
    expect(lines.find((l) => l.startsWith("needs-pg"))).toMatch(/Unsatisfiable +0\/1 .* db: NoProvider$/);

    const json = bufferOutput();
    expect(await runGet(mesh.store, { resource: "modules", name: "shop", json: true }, json)).toBe(ExitCodes.Ok);
    const body = JSON.parse(json.stdout) as { modules: unknown[] };
    expect(body.modules).toEqual([
      {
        name: "shop",
        state: "Ready",
        ready: { satisfied: 1, total: 1 },
        message: "all requirements are satisfied",
        since: expect.any(String),
        parts: [{ name: "api", node: "node-a", installed: true }],
      },
    ]);

    const never = bufferOutput();
    expect(await runGet(mesh.store, { resource: "modules", name: "nosuch" }, never)).toBe(ExitCodes.NotProcessed);
    expect(never.stderr).toContain("no manifest of module nosuch has been processed");
  });

  it("get grants: each requirement with provider, generation, holders and state; exit 5 for no such grant", async () => {
    const out = bufferOutput();
    expect(await runGet(mesh.store, { resource: "grants", name: "shop" }, out)).toBe(ExitCodes.Ok);
    expect(out.stdout).toMatch(
      /^NAME +KIND +PROVIDER +GEN +HOLDERS +STATE +REASON +UPDATED\nshop\/key +secret +builtin-secret +1 +1\/1 +Satisfied +- +\d+ s ago\n$/,
    );
    const json = bufferOutput();
    expect(await runGet(mesh.store, { resource: "grants", json: true }, json)).toBe(ExitCodes.Ok);
    const rows = (JSON.parse(json.stdout) as { grants: Array<Record<string, unknown>> }).grants;
    expect(rows.filter((r) => FIXTURE_NAMES.includes(String(r.id).split("/")[0]!)).map((r) => [r.id, r.state, r.reason])).toEqual([
      ["far/key", "InProgress", "AwaitingDelivery"],
      ["needs-pg/db", "Unsatisfiable", "NoProvider"],
      ["shop/key", "Satisfied", null],
    ]);
    const missing = await exitOf(() => runGet(mesh.store, { resource: "grants", name: "shop/nope" }, bufferOutput()));
    expect(missing.code).toBe(ExitCodes.NotFound);
    expect(missing.message).toContain("grant shop/nope does not exist");
  });

  it("get providers: the built-in one with the grants it serves; exit 5 for no such provider", async () => {
    const out = bufferOutput();
    expect(await runGet(mesh.store, { resource: "providers" }, out)).toBe(ExitCodes.Ok);
    const served = (await runGetJson("grants")).grants.filter((g) => g.provider === "builtin-secret").length;
    expect(out.stdout).toMatch(new RegExp(`^NAME +SERVES +NODE +INSTALLED +GRANTS +REACHABLE\nbuiltin-secret +secret +- +yes +${served} +built-in\n$`));
    const missing = await exitOf(() => runGet(mesh.store, { resource: "providers", name: "pg-main" }, bufferOutput()));
    expect(missing.code).toBe(ExitCodes.NotFound);
    expect(missing.message).toContain("provider pg-main does not exist");
  });
});

describe("meshctl get -o name|wide, status -o name", () => {
  it("prints <kind>/<name> a line, and more columns in wide", async () => {
    const names = bufferOutput();
    expect(await runGet(mesh.store, { resource: "grants", name: "shop", output: "name" }, names)).toBe(ExitCodes.Ok);
    expect(names.stdout).toBe("grant/shop/key\n");
    const providers = bufferOutput();
    await runGet(mesh.store, { resource: "providers", output: "name" }, providers);
    expect(providers.stdout).toBe("provider/builtin-secret\n");
    const wide = bufferOutput();
    await runGet(mesh.store, { resource: "grants", name: "far", output: "wide" }, wide);
    expect(wide.stdout).toMatch(
      /^NAME +KIND +PROVIDER +GEN +HOLDERS +STATE +VERIFIED +TARGETS +REASON +UPDATED\nfar\/key +secret +builtin-secret +1 +0\/1 +InProgress +- +api@node-z +AwaitingDelivery +\d+ s ago\n$/,
    );
    const status = await meshctl(["status", "-o", "name"]);
    expect(status.status).toBe(0);
    expect(status.stdout.split("\n").filter((l) => FIXTURE_NAMES.some((n) => l === `module/${n}`))).toEqual(FIXTURE_NAMES.map((n) => `module/${n}`));
  });
});

describe("meshctl get -w", () => {
  /** Module `watched` with secret requirements `reqs`, applied. */
  const watched = async (reqs: string[]) => {
    const doc: ModuleDoc = {
      kind: "Module",
      name: "watched",
      parts: [{ name: "api", node: "node-a", installed: true }],
      requires: reqs.map((name) => ({ name, kind: "secret" })),
    };
    expect((await mesh.apply([doc])).ok).toBe(true);
  };

  it("lists the rows, then prints each row again as it changes, a deleted one marked, until stopped", async () => {
    await watched(["key"]);
    await mesh.waitForState("watched", "Ready");
    const out = bufferOutput();
    const stop = new AbortController();
    const running = runGet(mesh.store, { resource: "grants", name: "watched", watch: stop.signal }, out);
    await waitFor("the list", () => out.stdout.includes("watched/key"));
    expect(out.stdout.split("\n")[0]).toMatch(/^NAME +KIND +PROVIDER +GEN +HOLDERS +STATE +REASON +UPDATED$/);
    await watched(["extra", "key"]);
    await waitFor("watched/extra, Satisfied", () => /\nwatched\/extra .* Satisfied /.test(out.stdout), 20_000);
    await watched(["key"]);
    await waitFor("watched/extra gone", () => /\nwatched\/extra .*\(deleted\)\n/.test(out.stdout), 20_000);
    stop.abort();
    expect(await running).toBe(ExitCodes.Ok);
    // The header once, at the top.
    expect(out.stdout.match(/^NAME /gm)).toHaveLength(1);
  });

  it("fails, saying so, when its connection closes for good, rather than watch nothing", async () => {
    await watched(["key"]);
    await mesh.waitForState("watched", "Ready");
    const nc = await connectNats(mesh.nats.url);
    const store = await openStore(nc);
    const out = bufferOutput();
    const running = exitOf(() => runGet(store, { resource: "grants", name: "watched", watch: new AbortController().signal }, out));
    await waitFor("the list", () => out.stdout.includes("watched/key"));
    // Drained, not closed: a request in flight is answered first, so only the watches end.
    await nc.drain();
    const r = await running;
    expect(r.code).toBe(ExitCodes.Failure);
    expect(r.message).toContain("the watch ended: the connection to NATS closed");
  });

  it("prints one JSON event a line from the built meshctl, and exits 0 on Ctrl-C", async () => {
    await watched(["key"]);
    await mesh.waitForState("watched", "Ready");
    const child = spawn(process.execPath, [join(repo, "packages/cli/bin/meshctl.js"), "get", "grants", "watched", "-w", "-o", "json"], {
      env: { ...process.env, NO_COLOR: "1", NATS_URL: mesh.nats.url },
    });
    let stdout = "";
    child.stdout.on("data", (b: Buffer) => (stdout += b.toString()));
    const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
    const events = () =>
      stdout
        .split("\n")
        .filter(Boolean)
        .map((l) => JSON.parse(l) as { type: string; grant: { id: string; state: string } });
    await waitFor("the first event", () => events().some((e) => e.type === "ADDED" && e.grant.id === "watched/key"));
    await watched(["key", "more"]);
    await waitFor("watched/more added and then satisfied", () => events().some((e) => e.grant.id === "watched/more" && e.grant.state === "Satisfied"), 20_000);
    expect(events().find((e) => e.grant.id === "watched/more")?.type).toBe("ADDED");
    child.kill("SIGINT");
    expect(await exited).toBe(0);
    await watched(["key"]);
  });
});

describe("meshctl wait", () => {
  it("exits 0 at once when the module is in the state", async () => {
    const out = bufferOutput();
    expect(await runWait(mesh.store, { module: "shop", for: "Ready", timeoutMs: 5_000 }, out)).toBe(ExitCodes.Ok);
    expect(out.stdout).toMatch(/shop Ready: all requirements are satisfied\nshop is Ready\n$/);
  });

  it("waits for a module applied meanwhile, redrawing its line on a terminal", async () => {
    const out = bufferOutput({ isTTY: true });
    const waiting = runWait(mesh.store, { module: "later", for: "Ready", timeoutMs: 20_000 }, out);
    await waitFor("wait to say the module has no manifest yet", () => out.stdout.includes("later: no manifest of it is stored"), 10_000);
    expect(
      (
        await mesh.apply([
          { kind: "Module", name: "later", parts: [{ name: "api", node: "node-a", installed: true }], requires: [{ name: "key", kind: "secret" }] },
        ])
      ).ok,
    ).toBe(true);
    expect(await waiting).toBe(ExitCodes.Ok);
    expect(out.stdout).toContain("\r\x1b[2Klater: no manifest of it is stored");
    // eslint-disable-next-line no-control-regex -- the terminal escape is what it checks
    expect(out.stdout).toMatch(/\r\x1b\[2Klater Ready: all requirements are satisfied\nlater is Ready\n$/);
  });

  it("exits 9 on timeout naming the state it last saw and why", async () => {
    const out = bufferOutput();
    const started = Date.now();
    expect(await runWait(mesh.store, { module: "needs-pg", for: "Ready", timeoutMs: 1_000 }, out)).toBe(ExitCodes.WaitTimedOut);
    expect(Date.now() - started).toBeGreaterThanOrEqual(1_000);
    expect(out.stderr.replace(/\s+/g, " ")).toContain(
      "meshctl: needs-pg is not Ready after 1.0 s (--timeout): last seen Unsatisfiable: db: NoProvider; meshctl explain needs-pg says why",
    );
  });

  it("exits 3 only after the timeout for a module that still has no state", async () => {
    const out = bufferOutput();
    const started = Date.now();
    expect(await runWait(mesh.store, { module: "ghost", for: "Ready", timeoutMs: 1_000, json: true }, out)).toBe(ExitCodes.NotProcessed);
    expect(Date.now() - started).toBeGreaterThanOrEqual(1_000);
    expect(JSON.parse(out.stdout)).toMatchObject({
      module: "ghost",
      for: "Ready",
      timedOut: true,
      outcome: "waiting",
      state: null,
      error: { code: "NotProcessed", module: "ghost" },
    });
    expect(out.stderr).toBe("");
  });
});

describe("the built meshctl", () => {
  it("--version prints the package's version", async () => {
    const r = await meshctl(["--version"]);
    expect(r.status).toBe(0);
    expect(r.stdout.trim()).toBe((JSON.parse(readFileSync(join(repo, "packages/cli/package.json"), "utf8")) as { version: string }).version);
  });

  // Some twenty runs of the built meshctl, each a process of its own.
  it("prints every state it reads as -o yaml the same as -o json, and describe is explain", { timeout: 180_000 }, async () => {
    const commands = [
      ["status"],
      ["status", "shop"],
      ["get", "modules"],
      ["get", "grants", "shop"],
      ["get", "providers"],
      ["explain", "needs-pg"],
      ["wait", "shop", "--for", "Ready"],
    ];
    for (const args of commands) {
      const [json, yaml] = [await meshctl([...args, "-o", "json"]), await meshctl([...args, "-o", "yaml"])];
      expect(json.status, `${args.join(" ")} -o json: ${json.stderr}`).toBe(0);
      expect(yaml.status, `${args.join(" ")} -o yaml: ${yaml.stderr}`).toBe(0);
      expect(yaml.stdout.trimStart().startsWith("{"), `${args.join(" ")} -o yaml printed JSON`).toBe(false);
      expect(parseYaml(yaml.stdout), args.join(" ")).toEqual(JSON.parse(json.stdout));
    }
    // --json stays the alias of -o json.
    expect(JSON.parse((await meshctl(["get", "grants", "shop", "--json"])).stdout)).toEqual(
      JSON.parse((await meshctl(["get", "grants", "shop", "-o", "json"])).stdout),
    );
    const described = await meshctl(["describe", "needs-pg", "-o", "json"]);
    expect(described.status).toBe(0);
    expect(JSON.parse(described.stdout)).toEqual(JSON.parse((await meshctl(["explain", "needs-pg", "--json"])).stdout));
    const unknown = await meshctl(["status", "-o", "xml"]);
    expect(unknown.status).toBe(2);
    expect(unknown.stderr).toContain("Allowed choices are json, yaml");
  });

  it("completes subcommands, options, their values and the mesh's grants and modules in bash", async () => {
    const script = await meshctl(["completion", "bash"]);
    expect(script.status, script.stderr).toBe(0);
    const file = join(dir, "meshctl.bash");
    writeFileSync(file, script.stdout);
    expect(spawnSync("bash", ["-n", file], { encoding: "utf8" }).status).toBe(0);
    // The meshctl a user's shell runs: this one, on this mesh's server.
    const bin = join(dir, "bin");
    mkdirSync(bin, { recursive: true });
    writeFileSync(
      join(bin, "meshctl"),
      `#!/bin/sh\nexec ${JSON.stringify(process.execPath)} ${JSON.stringify(join(repo, "packages/cli/bin/meshctl.js"))} "$@"\n`,
      {
        mode: 0o755,
      },
    );
    const complete = (...words: string[]) => {
      const r = spawnSync(
        "bash",
        [
          "-c",
          `source ${JSON.stringify(file)}; COMP_WORDS=(meshctl ${words.map((w) => JSON.stringify(w)).join(" ")}); COMP_CWORD=${words.length}; _meshctl_complete; printf '%s\\n' "\${COMPREPLY[@]}"`,
        ],
        { encoding: "utf8", env: { ...process.env, PATH: `${bin}:${process.env.PATH}`, NATS_URL: mesh.nats.url } },
      );
      expect(r.status, r.stderr).toBe(0);
      return r.stdout.split("\n").filter(Boolean);
    };
    expect(complete("ro")).toEqual(["rotate"]);
    expect(complete("des")).toEqual(["describe"]);
    expect(complete("status", "--o")).toEqual(["--output"]);
    expect(complete("status", "-o", "y")).toEqual(["yaml"]);
    expect(complete("rotate", "shop/")).toEqual(["shop/key"]);
    expect(complete("rotate", "--timeout", "30s", "f")).toEqual(["far/key"]);
    expect(complete("explain", "needs")).toEqual(["needs-pg"]);
    expect(complete("get", "gr")).toEqual(["grants"]);
    expect(complete("get", "grants", "sh")).toEqual(["shop/key"]);
    expect(complete("completion", "f")).toEqual(["fish"]);
  });

  it("get, wait and apply --wait are wired with their exit codes", async () => {
    const get = await meshctl(["get", "grants", "shop", "--json"]);
    expect(get.status).toBe(0);
    expect(JSON.parse(get.stdout)).toMatchObject({ grants: [{ id: "shop/key", state: "Satisfied" }] });
    expect((await meshctl(["get", "module", "nosuch"])).status).toBe(3);
    const bad = await meshctl(["get", "things"]);
    expect(bad.status).toBe(2);
    expect(bad.stderr).toContain('cannot get "things": give one of modules, grants, providers');

    const wait = await meshctl(["wait", "shop", "--for", "ready", "--timeout", "5s"]);
    expect(wait.stdout).toContain("shop is Ready");
    expect(wait.status).toBe(0);
    const wrong = await meshctl(["wait", "shop", "--for", "Done"]);
    expect(wrong.status).toBe(2);
    expect(wrong.stderr).toContain(`give one of ${Object.values(ModuleStates).join(", ")}`);
    const late = await meshctl(["wait", "far", "--for", "Ready", "--timeout", "1s"]);
    expect(late.status).toBe(9);

    const manifests = join(dir, "built");
    mkdirSync(manifests);
    write(join(manifests, "shop.yaml"), "kind: Module\nname: shop\nparts: [{ name: api, node: node-a }]\nrequires: [{ name: key, kind: secret }]\n");
    const applied = await meshctl(["apply", "-f", manifests, "--wait", "--timeout", "10s"]);
    expect(applied.stderr).toBe("");
    expect(applied.status).toBe(0);
    expect(applied.stdout).toContain("shop Ready: all requirements are satisfied");
  });
});
