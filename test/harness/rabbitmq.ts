/**
 * A test run's own RabbitMQ node with the management plugin on, on free ports, in a temporary
 * directory (its data, logs, plugins file and Erlang cookie). The machine's own RabbitMQ is
 * left as it is: on a fresh machine of this kind its management plugin is off, and enabling it
 * would change a service the tests do not own.
 *
 * The node is `mesh-test-<hex>@localhost` and registers with the machine's epmd, as every
 * Erlang node on the host does. `stop()` ends only the node it started: the PID the server
 * wrote to its own pid file, never a process found by name.
 *
 * With `tls`, AMQP and the management API listen over TLS alone (no plain listener), presenting
 * that certificate and asking none of their clients; the harness's own calls do not verify it.
 */
import { randomBytes } from "node:crypto";
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { promisify } from "node:util";
import { Agent, fetch as fetchWith } from "undici";
import { writeServerCertificate, type ServerCertificate } from "./server-certificate.js";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { freePort } from "./ports.js";

/** Debian's server script (the one in /usr/sbin switches to the `rabbitmq` user and its cookie), else PATH. */
export const RABBITMQ_SERVER_BIN =
  process.env.RABBITMQ_SERVER_BIN || (existsSync("/usr/lib/rabbitmq/bin/rabbitmq-server") ? "/usr/lib/rabbitmq/bin/rabbitmq-server" : "rabbitmq-server");

/** How long the node may take to answer on its management API (seen here: 4-6 s on a busy machine). */
export const RABBITMQ_START_TIMEOUT_MS = 60_000;

export interface OwnRabbitmq {
  amqpPort: number;
  /** `http://127.0.0.1:<port>` (`https://` with `tls`), as a Provider's `options.managementUrl`. */
  managementUrl: string;
  /** An administrator; RabbitMQ's default `guest`, which it lets in from loopback only. */
  user: string;
  password: string;
  dir: string;
  /** Stops the node (SIGTERM, SIGKILL after 15 s) and removes its directory. Idempotent. */
  stop(): Promise<void>;
  /** With `tls`: presents `cert` to every new connection from now on (the files replaced, then the node's PEM cache cleared). */
  presentCertificate(cert: ServerCertificate): Promise<void>;
}

/** Starts a node and resolves once its management API answers as `guest`. */
export async function startOwnRabbitmq(opts: { tls?: ServerCertificate } = {}): Promise<OwnRabbitmq> {
  const dir = mkdtempSync(join(tmpdir(), "mesh-rabbitmq-"));
  const [amqpPort, managementPort, distPort] = [await freePort(), await freePort(), await freePort()];
  writeFileSync(join(dir, "enabled_plugins"), "[rabbitmq_management].\n");
  const certFile = join(dir, "server.crt");
  const keyFile = join(dir, "server.key");
  if (opts.tls) writeServerCertificate(opts.tls, { certFile, keyFile });
  const listeners = opts.tls
    ? [
        "listeners.tcp = none",
        `listeners.ssl.default = 127.0.0.1:${amqpPort}`,
        `ssl_options.certfile = ${certFile}`,
        `ssl_options.keyfile = ${keyFile}`,
        "ssl_options.verify = verify_none",
        "ssl_options.fail_if_no_peer_cert = false",
        "management.ssl.ip = 127.0.0.1",
        `management.ssl.port = ${managementPort}`,
        `management.ssl.certfile = ${certFile}`,
        `management.ssl.keyfile = ${keyFile}`,
      ]
    : [`listeners.tcp.default = 127.0.0.1:${amqpPort}`, `management.tcp.ip = 127.0.0.1`, `management.tcp.port = ${managementPort}`];
  writeFileSync(join(dir, "rabbitmq.conf"), [...listeners, ""].join("\n"));
  const pidFile = join(dir, "rabbitmq.pid");
  const env = {
    ...process.env,
    // The cookie is created under HOME: the node's own, not the machine's.
    HOME: dir,
    RABBITMQ_NODENAME: `mesh-test-${randomBytes(4).toString("hex")}@localhost`,
    RABBITMQ_NODE_IP_ADDRESS: "127.0.0.1",
    RABBITMQ_DIST_PORT: String(distPort),
    RABBITMQ_CONFIG_FILE: join(dir, "rabbitmq.conf"),
    RABBITMQ_ADVANCED_CONFIG_FILE: join(dir, "advanced.config"),
    RABBITMQ_ENABLED_PLUGINS_FILE: join(dir, "enabled_plugins"),
    RABBITMQ_MNESIA_BASE: join(dir, "mnesia"),
    RABBITMQ_LOG_BASE: join(dir, "log"),
    RABBITMQ_PID_FILE: pidFile,
  };
  let output = "";
  const child: ChildProcess = spawn(RABBITMQ_SERVER_BIN, [], { env, cwd: dir, stdio: ["ignore", "pipe", "pipe"] });
  child.stdout!.on("data", (d: Buffer) => (output = (output + d.toString()).slice(-8_000)));
  child.stderr!.on("data", (d: Buffer) => (output = (output + d.toString()).slice(-8_000)));
  await new Promise<void>((resolve, reject) => {
    child.once("error", (e) =>
      reject(new Error(`cannot run ${RABBITMQ_SERVER_BIN} (${e.message}); install it with apt-get install -y rabbitmq-server, or set RABBITMQ_SERVER_BIN`)),
    );
    child.once("spawn", resolve);
  });

  const serverPid = (): number | undefined => {
    try {
      const pid = Number(readFileSync(pidFile, "utf8").trim());
      return Number.isInteger(pid) && pid > 0 ? pid : undefined;
    } catch {
      return undefined;
    }
  };
  const alive = (pid: number) => {
    try {
      process.kill(pid, 0);
      return true;
    } catch {
      return false;
    }
  };
  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    const pid = serverPid();
    if (pid && alive(pid)) {
      process.kill(pid, "SIGTERM");
      const deadline = Date.now() + 15_000;
      while (alive(pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
      if (alive(pid)) process.kill(pid, "SIGKILL");
    }
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    rmSync(dir, { recursive: true, force: true });
  };

  const managementUrl = `${opts.tls ? "https" : "http"}://127.0.0.1:${managementPort}`;
  const unverified = opts.tls ? new Agent({ connect: { rejectUnauthorized: false } }) : undefined;
  const deadline = Date.now() + RABBITMQ_START_TIMEOUT_MS;
  for (;;) {
    const init = { headers: { authorization: `Basic ${Buffer.from("guest:guest").toString("base64")}` }, signal: AbortSignal.timeout(2_000) };
    const ok = await (
      unverified ? fetchWith(`${managementUrl}/api/overview`, { ...init, dispatcher: unverified }) : fetch(`${managementUrl}/api/overview`, init)
    ).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) break;
    if (child.exitCode !== null || Date.now() > deadline) {
      const why =
        child.exitCode !== null ? `exited with code ${child.exitCode}` : `did not answer on ${managementUrl} within ${RABBITMQ_START_TIMEOUT_MS / 1000} s`;
      await stop();
      throw new Error(`the test run's own RabbitMQ (${RABBITMQ_SERVER_BIN}) ${why}; its last output:\n${output.trim().slice(-2_000)}`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  await unverified?.close();
  const presentCertificate = async (cert: ServerCertificate) => {
    if (!opts.tls) throw new Error("this RabbitMQ was started without tls: it presents no certificate");
    writeServerCertificate(cert, { certFile, keyFile });
    // Erlang's ssl caches the PEM files it read; new handshakes read them again once the cache is cleared.
    await promisify(execFile)(
      RABBITMQ_SERVER_BIN.includes("/") ? join(dirname(RABBITMQ_SERVER_BIN), "rabbitmqctl") : "rabbitmqctl",
      ["-n", env.RABBITMQ_NODENAME, "eval", "ssl:clear_pem_cache()."],
      {
        env,
        cwd: dir,
      },
    );
  };
  return { amqpPort, managementUrl, user: "guest", password: "guest", dir, stop, presentCertificate };
}
