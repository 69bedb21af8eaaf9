/**
 * `meshctl bootstrap` as an operator runs it: a real process tree (meshctl, its nats-server
 * whose operator is the mesh, on a free port, the services, the agents) in a temporary directory.
 * Tests read what it printed, ask the server's monitoring endpoint who is connected as whom,
 * and find a service's process to stop or kill it.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { connect, credsAuthenticator } from "@nats-io/transport-node";
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { freePort } from "./ports.js";
import { waitFor } from "./wait.js";

const repo = fileURLToPath(new URL("../..", import.meta.url));
export const meshctlBin = join(repo, "packages/cli/bin/meshctl.js");

/** Runs meshctl with `args` in `cwd` with exactly `env`; resolves with its exit code and output. */
export function runMeshctl(
  cwd: string,
  args: string[],
  env: NodeJS.ProcessEnv,
  killAfterMs = MESHCTL_KILL_AFTER_MS,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [meshctlBin, ...args], { cwd, env, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    p.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
    p.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    // A meshctl that never exits fails its test saying so, with what it printed, instead of
    // holding it until the test's own timeout, which names no step.
    const started = Date.now();
    let killed = false;
    const kill = setTimeout(() => ((killed = true), p.kill("SIGKILL")), killAfterMs);
    // "close", not "exit": the output is read to its end first.
    p.once("close", (code) => {
      clearTimeout(kill);
      if (killed) stderr += `\n(meshctl ${args.join(" ")} had not exited ${Math.round((Date.now() - started) / 1000)} s after it started: killed by the test)`;
      resolve({ code, stdout, stderr });
    });
  });
}

/**
 * Applies module `app` (part `api` on `node`, installed, requiring secret `key`) from a file in
 * `dir` (default the mesh's directory) as the administrator, and waits until it is Ready;
 * resolves with meshctl's result.
 */
export async function applySecretModule(
  mesh: Pick<BootstrappedMesh, "cwd" | "meshctl">,
  opts: { node?: string; dir?: string; timeout?: string } = {},
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const manifest = join(opts.dir ?? mesh.cwd, "app.yaml");
  writeFileSync(
    manifest,
    [
      "kind: Module",
      "name: app",
      "parts:",
      `  - { name: api, node: ${opts.node ?? "node-a"}, installed: true }`,
      "requires:",
      "  - { name: key, kind: secret }",
      "",
    ].join("\n"),
  );
  return mesh.meshctl(["apply", "-f", manifest, "--wait", ...(opts.timeout ? ["--timeout", opts.timeout] : [])]);
}

/** What a test's client adds to connect to the server `meshctl up` or `bootstrap` started in `cwd`: TLS verified against the mesh's authority (none for a server it did not start). */
export function ownServerTls(cwd: string): { tls?: { caFile: string } } {
  return existsSync(join(cwd, ".mesh/nats-operator/tls/current")) ? { tls: { caFile: join(cwd, ".mesh/mesh-ca/ca.crt") } } : {};
}

/**
 * Whether NATS accepts the identity of `creds` now: false only when it says so (an
 * authorization violation); a connection that failed otherwise (a busy machine, a socket
 * closed mid-refusal) is tried again.
 */
export async function logsIn(mesh: Pick<BootstrappedMesh, "url" | "tls">, creds: string): Promise<boolean> {
  for (let attempt = 1; ; attempt++) {
    try {
      const nc = await connect({
        servers: mesh.url,
        authenticator: credsAuthenticator(new TextEncoder().encode(creds)),
        reconnect: false,
        timeout: 5_000,
        ...mesh.tls(),
      });
      await nc.flush();
      await nc.close();
      return true;
    } catch (e) {
      if (/authorization violation|authentication revoked/i.test(String(e))) return false;
      if (attempt >= 5) throw e;
    }
  }
}

/** How long a test lets one meshctl run unless it says: past the longest wait a test gives meshctl (rotate --wait --timeout 240s, and 15 s). */
const MESHCTL_KILL_AFTER_MS = 300_000;

/** Marks, in its environment, a service instance a test started beside the one meshctl runs. */
export const SECOND_INSTANCE_ENV = "MESH_TEST_INSTANCE";

export interface BootstrappedMesh {
  cwd: string;
  url: string;
  /** The server's monitoring endpoint (`--nats-monitor`), as bootstrap printed it. */
  monitorUrl: string;
  proc: ChildProcess;
  /** Everything meshctl printed so far. */
  output(): string;
  /** The environment that makes meshctl (or a test's client) the operator's admin. */
  adminEnv: Record<string, string>;
  /** The admin's `.creds` file. */
  adminCredsFile: string;
  /** What a test's own client adds to connect to the server: TLS verified against the mesh's authority when the server is the one bootstrap started (it requires TLS). */
  tls(): { tls?: { caFile: string } };
  adminCreds(): string;
  /** The server's client connections right now: connection name (`mesh-resolver`…), the user's nkey and its JWT's name. */
  connections(): Promise<Array<{ name: string; user: string; tag: string }>>;
  /** PID of the running process of service `script` (`agent`, `resolver`…) started by this mesh; with `env`, the one whose environment has those values (`{ MESH_NODE: "node-b" }`). */
  servicePid(script: string, env?: Record<string, string>): number | undefined;
  /** Runs meshctl with `args` as the administrator (or with `env` over that); resolves with its exit code and output (killed, and saying so, after `killAfterMs`). */
  meshctl(args: string[], env?: Record<string, string>, killAfterMs?: number): Promise<{ code: number | null; stdout: string; stderr: string }>;
  /** Stops meshctl (and so everything it started); with `keep`, the directory (keys, store, bindings) stays, for a restart. */
  stop(opts?: { keep?: boolean }): Promise<void>;
}

/**
 * A server bootstrap is to use rather than start one: the URLs of a cluster (comma-separated),
 * the directory whose `.mesh/` already holds its operator's keys and the master key, and the
 * members' monitoring endpoints (harness/nats-cluster.ts makes all three).
 */
export interface ExistingServers {
  cwd: string;
  url: string;
  monitorUrls: string[];
}

/** With `restart`, bootstrap runs again in the directory and at the URL of a mesh stopped with `keep`: a cold start of the same mesh. */
export async function startBootstrappedMesh(
  opts: {
    nodes?: string[];
    readyTimeoutMs?: number;
    restart?: Pick<BootstrappedMesh, "cwd" | "url">;
    on?: ExistingServers;
    env?: Record<string, string>;
    /** More options of bootstrap (`--nats-tls-lifetime 15s`). */
    args?: string[];
    /** The meshctl that runs bootstrap, and so the services' programs (default this tree's; harness/previous-release.ts has the previous release's). */
    meshctl?: string;
  } = {},
): Promise<BootstrappedMesh> {
  const cwd = opts.restart?.cwd ?? opts.on?.cwd ?? mkdtempSync(join(tmpdir(), "mesh-boot-"));
  const url = opts.restart?.url ?? opts.on?.url ?? `nats://127.0.0.1:${await freePort()}`;
  let out = "";
  // The server bootstrap starts opens its monitoring port only when asked: the tests read /connz and /varz there.
  const monitor = opts.on ? [] : ["--nats-monitor", "127.0.0.1:0"];
  const proc = spawn(
    process.execPath,
    [opts.meshctl ?? meshctlBin, "bootstrap", ...(opts.nodes ? ["--nodes", opts.nodes.join(",")] : []), ...monitor, ...(opts.args ?? [])],
    {
      cwd,
      env: { ...process.env, NATS_URL: url, MESH_MASTER_KEY: "", MESH_MASTER_KEY_FILE: "", MESH_NATS_USER: "", MESH_NATS_CREDENTIALS: "", ...opts.env },
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  proc.stdout!.on("data", (d: Buffer) => (out += d.toString()));
  proc.stderr!.on("data", (d: Buffer) => (out += d.toString()));
  const adminCredsFile = join(cwd, ".mesh/nats-operator/admin.creds");
  const adminEnv = { NATS_URL: url, MESH_NATS_USER: "", MESH_NATS_PASSWORD_FILE: "", MESH_NATS_CREDENTIALS: adminCredsFile };

  const mesh: BootstrappedMesh = {
    cwd,
    url,
    monitorUrl: "",
    proc,
    output: () => out,
    adminEnv,
    adminCredsFile,
    adminCreds: () => readFileSync(adminCredsFile, "utf8"),
    tls: () => ownServerTls(cwd),
    async connections() {
      // On a cluster, every member's clients (a member that is down has none).
      const all = await Promise.all(
        (opts.on?.monitorUrls ?? [mesh.monitorUrl]).map(async (m) => {
          const r = await fetch(`${m}/connz?auth=true&limit=4096`).catch(() => undefined);
          return ((await r?.json()) ?? {}) as { connections?: Array<{ name?: string; authorized_user?: string; name_tag?: string }> };
        }),
      );
      return all.flatMap((j) => (j.connections ?? []).map((c) => ({ name: c.name ?? "", user: c.authorized_user ?? "", tag: c.name_tag ?? "" })));
    },
    servicePid(script, want = {}) {
      for (const pid of readdirSync("/proc").filter((p) => /^\d+$/.test(p))) {
        try {
          const cmd = readFileSync(`/proc/${pid}/cmdline`, "utf8");
          if (!cmd.includes(`services/${script}/dist/main.js`)) continue;
          const env = readFileSync(`/proc/${pid}/environ`, "utf8").split("\0");
          // A second instance a test started beside meshctl's (harness/service-instances.ts) is not meshctl's.
          if (!env.includes(`NATS_URL=${url}`) || env.some((e) => e.startsWith(`${SECOND_INSTANCE_ENV}=`))) continue;
          if (Object.entries(want).every(([k, v]) => env.includes(`${k}=${v}`))) return Number(pid);
        } catch {
          // gone meanwhile
        }
      }
      return undefined;
    },
    meshctl: (args, env = {}, killAfterMs) => runMeshctl(cwd, args, { ...process.env, ...adminEnv, ...env }, killAfterMs),
    async stop(how = {}) {
      if (proc.exitCode === null && proc.signalCode === null) {
        const exited = new Promise((r) => proc.once("exit", r));
        proc.kill("SIGTERM");
        const t = setTimeout(() => proc.kill("SIGKILL"), 15_000);
        await exited;
        clearTimeout(t);
      }
      // MESH_TEST_KEEP_DIRS=1 keeps the directory (logs, NATS store) to look at after a failure.
      if (how.keep) return;
      if (process.env.MESH_TEST_KEEP_DIRS === "1") {
        // What bootstrap and its services printed, beside the store, for the timeline of a failure.
        writeFileSync(join(cwd, "meshctl-bootstrap.log"), out);
        console.error(`kept ${cwd} (MESH_TEST_KEEP_DIRS=1)`);
      }
      // A directory the test brought (a cluster's) is the test's to remove, after its servers stop.
      else if (!opts.on) rmSync(cwd, { recursive: true, force: true });
    },
  };
  try {
    mesh.monitorUrl = opts.on
      ? opts.on.monitorUrls[0]!
      : await waitFor("bootstrap to start its nats-server", () => /monitoring on (http:\/\/[0-9.:]+)/.exec(out)?.[1], 30_000);
    // A bootstrap that gave up says why at once, rather than after the whole wait.
    const exited = new Promise<never>((_, reject) => proc.once("exit", (code) => reject(new Error(`meshctl bootstrap exited with code ${code}`))));
    await Promise.race([
      waitFor("the services to run on their own identities", () => /with the identities the mesh granted them/.test(out), opts.readyTimeoutMs ?? 120_000),
      exited,
    ]);
    // The server bootstrap started takes the control plane's grant of its certificate once the
    // services run (its one reload, which leaves JetStream's API without responders a moment):
    // a test begins after it.
    if (!opts.on) {
      await Promise.race([
        waitFor("the server to present the control plane's certificate", () => /the NATS server presents generation \d+ of mesh\/nats-tls/.test(out), 60_000),
        exited,
      ]);
    }
  } catch (e) {
    await mesh.stop();
    throw new Error(`${(e as Error).message}\n--- meshctl bootstrap printed:\n${out}`, { cause: e });
  }
  return mesh;
}
