#!/usr/bin/env node
/**
 * Runs every benchmark in this folder (`*.bench.ts`), one after another, each in its own
 * process (through tsx, with `--expose-gc`), and prints what each prints. The benchmarks' own
 * files run through tsx; the mesh's packages (`@mesh/*`) resolve to their build (`dist/`, which
 * `npm run bench` makes first), so what is measured is the code as it ships, not tsx's
 * transform of it (which wraps every function to keep its name). A
 * benchmark prints its figures beside a baseline measured in the same run; none asserts a
 * time. `npm run bench -- NAME…` runs only the files whose name contains one of the NAMEs.
 * Each runs with the open-files soft limit raised to the hard limit, in a process group of its
 * own: what it started and left running when it ended (a nats-server with thousands of
 * consumers, holder processes, after a benchmark failed half-way) is stopped before the next
 * one starts, so it neither leaks nor weighs on the figures of the next; Ctrl-C reaches the
 * whole group. Exits non-zero when a benchmark failed to run.
 */
import { spawn } from "node:child_process";
import { readdirSync } from "node:fs";
import { constants } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..");
const only = process.argv.slice(2);
const files = readdirSync(here)
  .filter((f) => f.endsWith(".bench.ts"))
  .filter((f) => only.length === 0 || only.some((o) => f.includes(o)))
  .sort();
if (files.length === 0) {
  console.error(only.length ? `no benchmark matches ${only.join(", ")} in bench/` : "no benchmark (*.bench.ts) in bench/");
  process.exit(1);
}
const tsx = join(root, "node_modules", ".bin", "tsx");

/** Whether any process of group `pgid` is still running. */
function groupAlive(pgid) {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Stops what is left of group `pgid`: SIGTERM, then SIGKILL after `graceMs`. Resolves with whether anything was left. */
async function endGroup(pgid, graceMs = 10_000) {
  if (!groupAlive(pgid)) return false;
  process.kill(-pgid, "SIGTERM");
  for (const end = Date.now() + graceMs; groupAlive(pgid) && Date.now() < end;) await new Promise((r) => setTimeout(r, 100));
  if (groupAlive(pgid)) process.kill(-pgid, "SIGKILL");
  return true;
}

/** The signal (Ctrl-C's SIGINT, a SIGTERM) that stopped the run, passed on to the benchmark running. */
let interrupted;

/** Runs `cmd` as the leader of a process group of its own; resolves with how it ended once what it left running is stopped. */
async function runInGroup(cmd) {
  const child = spawn(cmd[0], cmd.slice(1), {
    cwd: root,
    stdio: "inherit",
    env: { ...process.env, MESH_LOG_LEVEL: process.env.MESH_LOG_LEVEL ?? "warn" },
    detached: true,
  });
  // Not in the terminal's foreground group any more: its Ctrl-C is passed on, and ends the run.
  const forward = (signal) => {
    interrupted = signal;
    try {
      process.kill(-child.pid, signal);
    } catch {
      // Already gone.
    }
  };
  process.on("SIGINT", forward);
  process.on("SIGTERM", forward);
  const ended = await new Promise((resolve) => {
    child.once("error", (error) => resolve({ error }));
    child.once("exit", (status, signal) => resolve({ status, signal }));
  });
  process.off("SIGINT", forward);
  process.off("SIGTERM", forward);
  if (child.pid !== undefined && (await endGroup(child.pid))) ended.left = true;
  return ended;
}

const failed = [];
for (const f of files) {
  console.log(`\n=== ${f} ===`);
  const t0 = Date.now();
  // Through sh, to raise the open-files limit to the hard one first (5,000 holders need about
  // 5,300 in nats-server, which the benchmark starts).
  const cmd = [tsx, "--tsconfig", join(root, "tsconfig.base.json"), "--expose-gc", join(here, f)];
  const r = await runInGroup(["sh", "-c", 'ulimit -n "$(ulimit -Hn)" 2>/dev/null; exec "$@"', "sh", ...cmd]);
  const took = ((Date.now() - t0) / 1000).toFixed(1);
  if (r.left) console.log(`=== ${f} left processes running (servers it started, holder processes): stopped ===`);
  if (interrupted) {
    console.error(`\n=== stopped by ${interrupted} during ${f}; the benchmarks after it did not run ===`);
    // As a shell reports a command a signal ended: 128 and the signal's number (130 for Ctrl-C, 143 for SIGTERM).
    process.exit(128 + constants.signals[interrupted]);
  }
  if (r.status !== 0) {
    failed.push(f);
    console.log(`=== ${f} failed (${r.error?.message ?? `exit ${r.status ?? r.signal}`}) after ${took} s ===`);
  } else {
    console.log(`=== ${f} done in ${took} s ===`);
  }
}
if (failed.length) {
  console.error(`\n${failed.length} benchmark(s) failed: ${failed.join(", ")}`);
  process.exit(1);
}
