/**
 * What the tests need of the machine, prepared once per vitest run (`npm test`, and
 * `npx vitest run FILE` alike), so a fresh clone needs nothing done by hand:
 *
 * - Debian packages the tests run binaries of. Missing ones are installed when the run is
 *   root (as on the machines this project runs on), else named once with the command that
 *   installs them.
 * - The machine's own servers the tests use as they stand (PostgreSQL on 5432, MariaDB on
 *   3306, Redis on 6379): checked, never started, stopped or reconfigured here.
 * - A RabbitMQ of the run's own with the management plugin on, since the machine's has it off
 *   when the machine starts (skipped when `RABBITMQ_TEST_MANAGEMENT_URL` points at one).
 *
 * Under `CI=true` anything missing fails the run at once; elsewhere it is reported and the
 * tests that need it fail with their own messages.
 */
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { CHROMIUM_BIN } from "./harness/browser.js";
import { NATS_SERVER_BIN } from "./harness/nats-server.js";
import { accepts } from "./harness/ports.js";
import { OCI_REGISTRY_BIN } from "./harness/oci-registry.js";
import { postgresBinDir } from "./harness/postgres.js";
import { RABBITMQ_SERVER_BIN, startOwnRabbitmq, type OwnRabbitmq } from "./harness/rabbitmq.js";

const run = promisify(execFile);

/** True when `bin` is a path that exists, or a name found on PATH. */
function onPath(bin: string): boolean {
  if (bin.includes("/")) return existsSync(bin);
  return (process.env.PATH ?? "").split(":").some((d) => d !== "" && existsSync(join(d, bin)));
}

interface Prerequisite {
  what: string;
  /** The Debian package that brings it. */
  pkg: string;
  present(): boolean;
}

const PACKAGES: readonly Prerequisite[] = [
  { what: `nats-server (${NATS_SERVER_BIN})`, pkg: "nats-server", present: () => onPath(NATS_SERVER_BIN) },
  {
    what: "the PostgreSQL server binaries (initdb, postgres)",
    pkg: "postgresql",
    present: () => {
      try {
        postgresBinDir();
        return true;
      } catch {
        return false;
      }
    },
  },
  { what: "redis-server", pkg: "redis-server", present: () => onPath(process.env.REDIS_SERVER_BIN || "redis-server") },
  { what: `rabbitmq-server (${RABBITMQ_SERVER_BIN})`, pkg: "rabbitmq-server", present: () => onPath(RABBITMQ_SERVER_BIN) },
  { what: `the distribution registry (${OCI_REGISTRY_BIN})`, pkg: "docker-registry", present: () => onPath(OCI_REGISTRY_BIN) },
  { what: "ip, for the tests' network namespaces", pkg: "iproute2", present: () => onPath("ip") },
  { what: `chromium (${CHROMIUM_BIN}), for the console's browser test`, pkg: "chromium", present: () => onPath(CHROMIUM_BIN) },
];

/** The machine's own servers that tests use as they are, with the machine's command that starts each. */
const MACHINE_SERVICES = [
  { what: "PostgreSQL", port: 5432, start: "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start" },
  { what: "MariaDB", port: 3306, start: "start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd" },
  {
    what: "Redis",
    port: 6379,
    start: 'redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log',
  },
] as const;

async function installPackages(missing: readonly Prerequisite[]): Promise<string[]> {
  const pkgs = [...new Set(missing.map((m) => m.pkg))];
  const command = `apt-get install -y ${pkgs.join(" ")}`;
  if (process.getuid?.() !== 0) {
    return [`missing: ${missing.map((m) => m.what).join(", ")}; install with: sudo apt-get update && sudo ${command}`];
  }
  console.log(`test setup: installing ${pkgs.join(", ")} (missing: ${missing.map((m) => m.what).join(", ")})`);
  const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
  try {
    await run("apt-get", ["update"], { env, maxBuffer: 64 << 20 });
    await run("apt-get", ["install", "-y", ...pkgs], { env, maxBuffer: 64 << 20 });
  } catch (e) {
    const err = e as { stderr?: string; message: string };
    return [`installing ${pkgs.join(" ")} failed: ${(err.stderr || err.message).trim().slice(-1_000)}; run: apt-get update && ${command}`];
  }
  const still = missing.filter((m) => !m.present());
  return still.length ? [`still missing after ${command}: ${still.map((m) => m.what).join(", ")}`] : [];
}

let rabbitmq: OwnRabbitmq | undefined;

export async function setup(): Promise<void> {
  const problems: string[] = [];
  const missing = PACKAGES.filter((p) => !p.present());
  if (missing.length) problems.push(...(await installPackages(missing)));

  for (const s of MACHINE_SERVICES) {
    if (!(await accepts(s.port))) problems.push(`the machine's ${s.what} does not answer on 127.0.0.1:${s.port}; start it with: ${s.start}`);
  }

  if (!process.env.RABBITMQ_TEST_MANAGEMENT_URL && onPath(RABBITMQ_SERVER_BIN)) {
    const t0 = Date.now();
    try {
      rabbitmq = await startOwnRabbitmq();
      Object.assign(process.env, {
        RABBITMQ_TEST_AMQP_PORT: String(rabbitmq.amqpPort),
        RABBITMQ_TEST_MANAGEMENT_URL: rabbitmq.managementUrl,
        RABBITMQ_TEST_USER: rabbitmq.user,
        RABBITMQ_TEST_PASSWORD: rabbitmq.password,
      });
      console.log(`test setup: RabbitMQ of this run on 127.0.0.1:${rabbitmq.amqpPort}, management API ${rabbitmq.managementUrl} (up in ${Date.now() - t0} ms)`);
    } catch (e) {
      problems.push((e as Error).message);
    }
  }

  if (problems.length === 0) return;
  const text = `the tests need what this machine lacks:\n${problems.map((p) => `  - ${p}`).join("\n")}`;
  if (process.env.CI === "true") {
    await teardown();
    throw new Error(text);
  }
  console.warn(`test setup: ${text}\n  (the tests that need it will fail)`);
}

export async function teardown(): Promise<void> {
  await rabbitmq?.stop();
  rabbitmq = undefined;
}
