/**
 * Declaring at scale: one `meshctl apply` (the real command, packages/cli/bin/meshctl.js, as a
 * process) of 1,000 modules, each with a `secret` for its part `api` on node-a, in four files;
 * how long the command takes and what it exits with, and when all 1,000 grants are delivered
 * (their `Delivered` condition True, written once node-a's agent wrote the files and its receipt
 * was folded in). The resolver, the provisioner and node-a's agent run in a process of their own
 * (services-process.ts), so this process only applies and watches.
 *
 * Beside it, in the same run: a single module's declare → delivered (an apply request of one
 * module, to its grant's `Delivered` condition True), 20 times, p50, beside the floor of one KV
 * put seen by a watcher on the same server (20 times, p50): the mesh's declare path is several
 * such writes in a row (manifest, grant, credential, delivery, receipt, grant again).
 * `BENCH_MODULES=N` changes the 1,000. Prints figures; asserts nothing.
 */
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Kvm } from "@nats-io/kv";
import { Grant, getCondition, subjects } from "@mesh/shared";
import { connectNats, openStore } from "@mesh/shared/runtime";
import { startNatsServer } from "../test/harness/nats-server.js";
import { forkServices } from "./services-fork.js";

const MODULES = Number(process.env.BENCH_MODULES ?? 1_000);
const SAMPLES = 20;
const root = join(import.meta.dirname, "..");
const ms = (n: number) => `${n.toFixed(n < 10 ? 2 : 0)} ms`;
const s = (n: number) => `${(n / 1000).toFixed(1)} s`;
const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.max(0, Math.ceil((p / 100) * xs.length) - 1))]!;
const line = (label: string, value: string) => console.log(`  ${label.padEnd(52)} ${value}`);
const sleep = (t: number) => new Promise((r) => setTimeout(r, t));

const nats = await startNatsServer();
const nc = await connectNats(nats.url);
const store = await openStore(nc);
const masterKeyHex = randomBytes(32).toString("hex");
const dir = mkdtempSync(join(tmpdir(), "bench-apply-"));
const services = await forkServices({
  url: nats.url,
  masterKeyHex,
  services: ["resolver", "provisioner", "agent"],
  agent: { node: "node-a", bindingsRoot: join(dir, "bindings") },
});

// When each grant was first seen Delivered, by this process's clock.
const deliveredAt = new Map<string, number>();
const watch = await store.kv.grants.watch({ include: "updates" });
void (async () => {
  for await (const e of watch) {
    if (e.operation !== "PUT" || deliveredAt.has(e.key)) continue;
    const g = Grant.safeParse(e.json());
    if (g.success && getCondition(g.data.conditions, "Delivered")?.status === "True") deliveredAt.set(e.key, performance.now());
  }
})();
const moduleYaml = (name: string) => `kind: Module\nname: ${name}\nparts:\n  - { name: api, node: node-a }\nrequires:\n  - { name: key, kind: secret }\n`;

try {
  // ---- floor: one KV put seen by a watcher ----
  const floorKv = await new Kvm(nc).create("bench-floor", { history: 1 });
  const seen = new Map<string, () => void>();
  const floorWatch = await floorKv.watch({ include: "updates" });
  void (async () => {
    for await (const e of floorWatch) seen.get(e.key)?.();
  })();
  const floor: number[] = [];
  for (let i = 0; i < SAMPLES; i++) {
    const k = `k${i}`;
    const t = performance.now();
    await new Promise<void>((r) => {
      seen.set(k, r);
      void floorKv.put(k, "x");
    });
    floor.push(performance.now() - t);
  }
  floorWatch.stop();

  // ---- a single module: declare → delivered ----
  const single: number[] = [];
  for (let i = 0; i < SAMPLES + 1; i++) {
    const name = `single-${i}`;
    const t = performance.now();
    const reply = await nc.request(
      subjects.apply,
      JSON.stringify({ documents: [{ kind: "Module", name, parts: [{ name: "api", node: "node-a" }], requires: [{ name: "key", kind: "secret" }] }] }),
      { timeout: 10_000 },
    );
    if (!(reply.json() as { ok?: boolean }).ok) throw new Error(`apply of ${name} failed: ${reply.string()}`);
    while (!deliveredAt.has(`${name}.key`)) await sleep(1);
    // The first is the warm-up (code paths, the agent's first delivery).
    if (i > 0) single.push(deliveredAt.get(`${name}.key`)! - t);
  }

  // ---- 1,000 modules in one meshctl apply ----
  const files = join(dir, "manifests");
  rmSync(files, { recursive: true, force: true });
  const names = Array.from({ length: MODULES }, (_, i) => `m-${String(i).padStart(5, "0")}`);
  mkdirSync(files, { recursive: true });
  // At most 256 documents go in one file (Limits.documents): 250 a file.
  for (let f = 0; f * 250 < MODULES; f++)
    writeFileSync(
      join(files, `${String(f).padStart(3, "0")}.yaml`),
      names
        .slice(f * 250, (f + 1) * 250)
        .map(moduleYaml)
        .join("---\n"),
    );
  const t0 = performance.now();
  const cli = spawn(process.execPath, [join(root, "packages/cli/bin/meshctl.js"), "apply", "-f", files], {
    env: { ...process.env, NATS_URL: nats.url },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  cli.stdout.on("data", (d: Buffer) => (out += d.toString()));
  cli.stderr.on("data", (d: Buffer) => (out += d.toString()));
  const code = await new Promise<number | null>((r) => cli.once("exit", (c) => r(c)));
  const applyMs = performance.now() - t0;
  const deadline = performance.now() + 300_000;
  while (names.some((n) => !deliveredAt.has(`${n}.key`)) && performance.now() < deadline) await sleep(20);
  const delivered = names.filter((n) => deliveredAt.has(`${n}.key`));
  const allMs = Math.max(...delivered.map((n) => deliveredAt.get(`${n}.key`)!)) - t0;
  const rss = services.rss();

  console.log(
    `\ndeclaring ${MODULES} modules (each one secret for api@node-a) with one meshctl apply of ${Math.ceil(MODULES / 250)} files; resolver, provisioner and agent in one process; the machine is shared:`,
  );
  line("meshctl apply", `exit ${code} after ${s(applyMs)}${code === 0 ? "" : `:\n${out.split("\n").slice(0, 12).join("\n")}`}`);
  line(
    `all ${MODULES} delivered (from the apply's start)`,
    `${delivered.length}/${MODULES} in ${s(allMs)} (${((delivered.length / allMs) * 1000).toFixed(0)} modules/s)`,
  );
  line("services process RSS after", `${(rss / 2 ** 20).toFixed(0)} MiB`);
  console.log(`\none module, declare → delivered (${SAMPLES} after a warm-up), beside one KV put seen by a watcher (${SAMPLES}):`);
  line("floor: KV put → watcher", `p50 ${ms(pct(floor, 50))}, p99 ${ms(pct(floor, 99))}`);
  line("declare → Delivered", `p50 ${ms(pct(single, 50))}, p99 ${ms(pct(single, 99))}  (${(pct(single, 50) / pct(floor, 50)).toFixed(1)} × the floor)`);
} finally {
  watch.stop();
  await services.stop();
  await nc.close();
  await nats.stop();
  rmSync(dir, { recursive: true, force: true });
}
