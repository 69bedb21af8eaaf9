/**
 * A network namespace for a test: a node of its own, whose loopback is not the test
 * machine's. Only the ports a test bridges into it are reachable from inside (a bridge is a
 * TCP listener inside the namespace that forwards, over a unix socket in the shared file
 * system, to the same port on the machine's loopback); every other port, a provider's
 * included, is really closed there: connecting gets ECONNREFUSED from the kernel.
 *
 * Needs `unshare`, `nsenter` and `ip` (util-linux, iproute2) and the right to create a network
 * namespace (root, as the tests run here). The namespace lives as long as the `sleep` process
 * that holds it; close() ends that process, the bridges, and everything started inside.
 */
import { spawn, execFile, type ChildProcess, type SpawnOptions } from "node:child_process";
import { createConnection, createServer, type Server, type Socket } from "node:net";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { waitFor } from "./wait.js";

const run = promisify(execFile);

/** A bridged port: open while it exists. */
export interface Bridge {
  port: number;
  /** Closes the port inside the namespace again (ends the forwarder there and the relay here). */
  close(): Promise<void>;
}

/** A network namespace and what a test does with it. */
export interface Netns {
  /** `/proc/<pid>/ns/net` of the namespace. */
  path: string;
  /** Starts `command` inside the namespace (through nsenter, which execs it: the child's PID is the command's). */
  spawn(command: string, args: string[], opts?: SpawnOptions): ChildProcess;
  /** Makes 127.0.0.1:`port` inside reach 127.0.0.1:`port` outside. */
  bridge(port: number): Promise<Bridge>;
  /** Whether 127.0.0.1:`port` accepts a connection from inside. */
  canConnect(port: number): Promise<boolean>;
  close(): Promise<void>;
}

/** The forwarder run inside the namespace: TCP 127.0.0.1:<port> → unix socket <path>. */
const FORWARDER = `
const net = require("node:net");
const [port, path] = process.argv.slice(1);
const server = net.createServer((c) => {
  const u = net.connect(path);
  c.pipe(u); u.pipe(c);
  const end = () => { c.destroy(); u.destroy(); };
  c.on("error", end); u.on("error", end); c.on("close", end); u.on("close", end);
});
server.listen(Number(port), "127.0.0.1", () => process.stdout.write("ready\\n"));
`;

const exited = (p: ChildProcess) =>
  new Promise<void>((resolve) => (p.exitCode !== null || p.signalCode !== null ? resolve() : p.once("exit", () => resolve())));

async function kill(p: ChildProcess): Promise<void> {
  if (p.exitCode !== null || p.signalCode !== null) return;
  const done = exited(p);
  p.kill("SIGTERM");
  const t = setTimeout(() => p.kill("SIGKILL"), 5_000);
  await done;
  clearTimeout(t);
}

/** Creates a network namespace with its loopback up; see the file's doc comment. */
export async function createNetns(): Promise<Netns> {
  const holder = spawn("unshare", ["--net", "--", "sleep", "infinity"], { stdio: "ignore" });
  const path = `/proc/${holder.pid}/ns/net`;
  const dir = mkdtempSync(join(tmpdir(), "mesh-netns-"));
  const children = new Set<ChildProcess>();
  const relays = new Set<Server>();
  // The holder is "sleep" only once unshare has exec'd it; until then its netns is the machine's.
  await waitFor(
    "the network namespace",
    async () => {
      const [mine, its] = await Promise.all([run("readlink", ["/proc/self/ns/net"]), run("readlink", [path])]);
      return mine.stdout.trim() !== its.stdout.trim();
    },
    5_000,
    20,
  );
  await run("nsenter", [`--net=${path}`, "--", "ip", "link", "set", "lo", "up"]);

  const ns: Netns = {
    path,
    spawn(command, args, opts = {}) {
      const p = spawn("nsenter", [`--net=${path}`, "--", command, ...args], opts);
      children.add(p);
      void exited(p).then(() => children.delete(p));
      return p;
    },
    async bridge(port) {
      const sock = join(dir, `bridge-${port}-${Date.now()}.sock`);
      const sockets = new Set<Socket>();
      const relay = createServer((c) => {
        const t = createConnection({ host: "127.0.0.1", port });
        sockets.add(c).add(t);
        c.pipe(t);
        t.pipe(c);
        const end = () => {
          c.destroy();
          t.destroy();
          sockets.delete(c);
          sockets.delete(t);
        };
        c.on("error", end).on("close", end);
        t.on("error", end).on("close", end);
      });
      await new Promise<void>((resolve) => relay.listen(sock, resolve));
      relays.add(relay);
      const fwd = ns.spawn(process.execPath, ["-e", FORWARDER, String(port), sock], { stdio: ["ignore", "pipe", "pipe"] });
      let err = "";
      fwd.stderr!.on("data", (d: Buffer) => (err += d.toString()));
      await new Promise<void>((resolve, reject) => {
        fwd.stdout!.once("data", () => resolve());
        fwd.once("exit", (code) => reject(new Error(`the forwarder of port ${port} in the namespace exited (${code}): ${err}`)));
      });
      return {
        port,
        async close() {
          await kill(fwd);
          for (const s of sockets) s.destroy();
          await new Promise<void>((resolve) => relay.close(() => resolve()));
          relays.delete(relay);
        },
      };
    },
    async canConnect(port) {
      const probe = ns.spawn(
        process.execPath,
        ["-e", `require("node:net").connect(${port}, "127.0.0.1").on("connect", () => process.exit(0)).on("error", () => process.exit(1))`],
        { stdio: "ignore" },
      );
      await exited(probe);
      return probe.exitCode === 0;
    },
    async close() {
      await Promise.all([...children].map(kill));
      for (const r of relays) r.close();
      await kill(holder);
      rmSync(dir, { recursive: true, force: true });
    },
  };
  return ns;
}

/** A node agent run inside a namespace (from sources, through tsx), and what it printed so far. */
export interface AgentInNetns {
  process: ChildProcess;
  output(): string;
}

/**
 * Starts node `node`'s agent inside `ns`, from sources (tsx), writing bindings under
 * `bindings`, with NATS at `natsUrl` (which the test bridges in) and its probes every
 * `probeInterval`; resolves once its node record is in `nodes` (the store's `mesh-nodes`).
 */
export async function startAgentInNetns(
  ns: Netns,
  opts: { node: string; bindings: string; natsUrl: string; probeInterval: string; nodes: { get(key: string): Promise<unknown> } },
): Promise<AgentInNetns> {
  const repo = join(import.meta.dirname, "..", "..");
  let out = "";
  const child = ns.spawn(
    join(repo, "node_modules/.bin/tsx"),
    [
      "--tsconfig",
      join(repo, "test/harness/tsconfig.sources.json"),
      join(repo, "services/agent/src/main.ts"),
      "--node",
      opts.node,
      "--bindings",
      opts.bindings,
    ],
    {
      cwd: repo,
      env: { ...process.env, NATS_URL: opts.natsUrl, MESH_PROBE_INTERVAL: opts.probeInterval, MESH_LOG_LEVEL: "info" },
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  for (const s of [child.stdout!, child.stderr!]) s.on("data", (d: Buffer) => (out = (out + d.toString()).slice(-40_000)));
  await waitFor(`${opts.node}'s agent to register`, async () => (await opts.nodes.get(opts.node)) ?? undefined, 60_000).catch((e: Error) => {
    throw new Error(`${e.message}\nits output:\n${out}`);
  });
  return { process: child, output: () => out };
}
