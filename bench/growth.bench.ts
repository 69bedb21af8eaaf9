/**
 * Memory and growth: how applying, a full verification pass and a rotation grow from 100 to
 * 10,000 grants of a cheap kind (`secret`), each held by one part (`api` on node-a, so as many
 * holders, all through node-a's agent), and each service's RSS at every size. One nats-server
 * per size (a fresh store), each service in a process of its own (services-process.ts): the
 * resolver, the provisioner, node-a's agent, the verifier (started once everything is
 * delivered, so its pass is measured alone) and the rotator.
 *
 * - apply: one `meshctl apply` of N modules in files of 250 (the real command), from its start
 *   to every grant's `Delivered` condition True;
 * - verify: from the verifier's start (its process loaded, then told to start) to every grant's
 *   `Verified` condition True (one check each; its first checks are spread over two seconds);
 * - rotate: `meshctl rotate <grant> --wait` of one grant (the public path, so the figure
 *   survives a rewrite of the rotator), three times, p50: from the command's start to its exit.
 *
 * The baseline of each column is its own first row (100): the table prints each time beside
 * the factor it grew by, against the factor N grew by; and the floor of the two meshctl columns,
 * a process of meshctl that does nothing (`meshctl --version`), is printed beside them. `BENCH_GROWTH_SIZES=100,1000` narrows
 * the sizes. The store's size on disk is printed beside the memory. `BENCH_CLUSTER=1` runs each
 * size on a three-server cluster instead (every bucket and stream R3, as the services make them
 * on a cluster), the servers' memory and stores summed. Prints figures; asserts nothing.
 */
import { execFileSync, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Grant, getCondition } from "@mesh/shared";
import { connectNats, openStore } from "@mesh/shared/runtime";
import { startNatsServer } from "../test/harness/nats-server.js";
import { startPlainCluster } from "../test/harness/nats-cluster.js";
import { rssOf } from "./bench-child.js";
import { forkServices, type ForkedServices } from "./services-fork.js";

const SIZES = (process.env.BENCH_GROWTH_SIZES ?? "100,1000,10000").split(",").filter(Boolean).map(Number);
const ROTATIONS = 3;
const onCluster = process.env.BENCH_CLUSTER === "1";
const root = join(import.meta.dirname, "..");
const s = (n: number) => `${(n / 1000).toFixed(1)} s`;
const mib = (b: number) => `${(b / 2 ** 20).toFixed(0)}`;
const sleep = (t: number) => new Promise((r) => setTimeout(r, t));
const moduleYaml = (name: string) => `kind: Module\nname: ${name}\nparts:\n  - { name: api, node: node-a }\nrequires:\n  - { name: key, kind: secret }\n`;

/** Runs meshctl with `args` against `url`; resolves with its exit code and output. */
function meshctl(url: string, args: string[]): Promise<{ code: number | null; out: string }> {
  const cli = spawn(process.execPath, [join(root, "packages/cli/bin/meshctl.js"), ...args], {
    env: { ...process.env, NATS_URL: url },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  cli.stdout.on("data", (d: Buffer) => (out += d.toString()));
  cli.stderr.on("data", (d: Buffer) => (out += d.toString()));
  return new Promise((r) => cli.once("exit", (code) => r({ code, out })));
}

interface Row {
  n: number;
  applyMs: number;
  applyExit: number | null;
  verifyMs: number;
  rotateMs: number;
  rss: Record<string, number>;
  nats: number;
  /** The servers' stores on disk, in bytes. */
  store: number;
}

async function measure(n: number): Promise<Row> {
  const nats = onCluster ? await startPlainCluster() : await startNatsServer();
  const servers = "members" in nats ? nats.members : [nats];
  const nc = await connectNats(nats.url);
  const store = await openStore(nc);
  const masterKeyHex = randomBytes(32).toString("hex");
  const dir = mkdtempSync(join(tmpdir(), "bench-growth-"));
  const forked: Record<string, ForkedServices> = {};
  const fork = async (name: string, services: Parameters<typeof forkServices>[0]["services"]) => {
    forked[name] = await forkServices({ url: nats.url, masterKeyHex, services, agent: { node: "node-a", bindingsRoot: join(dir, "bindings") } });
  };
  const delivered = new Set<string>();
  const verified = new Set<string>();
  const watch = await store.kv.grants.watch({ include: "updates" });
  void (async () => {
    for await (const e of watch) {
      if (e.operation !== "PUT") continue;
      const g = Grant.safeParse(e.json());
      if (!g.success) continue;
      if (getCondition(g.data.conditions, "Delivered")?.status === "True") delivered.add(e.key);
      if (getCondition(g.data.conditions, "Verified")?.status === "True") verified.add(e.key);
    }
  })();
  try {
    await fork("resolver", ["resolver"]);
    await fork("provisioner", ["provisioner"]);
    await fork("agent", ["agent"]);
    await fork("rotator", ["rotator"]);
    const names = Array.from({ length: n }, (_, i) => `m-${String(i).padStart(5, "0")}`);
    const files = join(dir, "manifests");
    mkdirSync(files);
    for (let f = 0; f * 250 < n; f++)
      writeFileSync(
        join(files, `${String(f).padStart(3, "0")}.yaml`),
        names
          .slice(f * 250, (f + 1) * 250)
          .map(moduleYaml)
          .join("---\n"),
      );

    const t0 = performance.now();
    const applied = await meshctl(nats.url, ["apply", "-f", files, "--timeout", "600s"]);
    if (applied.code !== 0) console.log(`  (meshctl apply exited ${applied.code}: ${applied.out.split("\n").slice(0, 6).join(" | ")})`);
    const until = performance.now() + 1_800_000;
    while (delivered.size < n && performance.now() < until) await sleep(50);
    const applyMs = performance.now() - t0;

    await fork("verifier", ["verifier"]);
    while (verified.size < n && performance.now() < until) await sleep(50);
    const verifyMs = performance.now() - forked.verifier!.startedAt;

    const rotations: number[] = [];
    for (let i = 0; i < ROTATIONS; i++) {
      const tr = performance.now();
      const r = await meshctl(nats.url, ["rotate", `${names[i * Math.floor(n / ROTATIONS)]}/key`, "--wait", "--timeout", "120s"]);
      if (r.code !== 0) console.log(`  (meshctl rotate exited ${r.code}: ${r.out.split("\n").slice(0, 6).join(" | ")})`);
      rotations.push(performance.now() - tr);
    }
    rotations.sort((a, b) => a - b);
    const rss = Object.fromEntries(Object.entries(forked).map(([k, f]) => [k, f.rss()]));
    const natsRss = servers.reduce((t, m) => t + (rssOf(m.pid) ?? 0), 0);
    const store = servers.reduce((t, m) => t + Number(execFileSync("du", ["-sk", m.storeDir], { encoding: "utf8" }).split("\t")[0]) * 1024, 0);
    return { n, applyMs, applyExit: applied.code, verifyMs, rotateMs: rotations[Math.floor(rotations.length / 2)]!, rss, nats: natsRss, store };
  } finally {
    watch.stop();
    for (const f of Object.values(forked).reverse()) await f.stop();
    await nc.close();
    await nats.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

const rows: Row[] = [];
for (const n of SIZES) {
  const t = Date.now();
  const r = await measure(n);
  rows.push(r);
  // Each row as it comes, so that a run cut short still says what it measured.
  console.log(
    `  [${n} grants measured in ${s(Date.now() - t)}: apply ${s(r.applyMs)}, verify ${s(r.verifyMs)}, rotate ${s(r.rotateMs)}; RSS MiB ${Object.entries(r.rss)
      .map(([k, v]) => `${k} ${mib(v)}`)
      .join(", ")}, nats-server ${mib(r.nats)}; store ${mib(r.store)} MiB]`,
  );
}
const floors: number[] = [];
for (let i = 0; i < 3; i++) {
  const t = performance.now();
  await meshctl("nats://127.0.0.1:1", ["--version"]);
  floors.push(performance.now() - t);
}
const base = rows[0]!;
const grew = (v: number, b: number) => `${s(v).padStart(8)} (×${(v / b).toFixed(1)})`;
console.log(
  `\ngrowth, ${onCluster ? "three nats-servers (R3)" : "one nats-server"}, ${SIZES.join(" / ")} secret grants each with one holder (node-a's agent); the machine is shared, so read the factors loosely:`,
);
console.log(
  `  ${"grants".padStart(7)} ${"×N".padStart(6)} | ${"apply → all delivered".padEnd(22)} | ${"verify, full pass".padEnd(22)} | ${"rotate one (p50)".padEnd(22)} | RSS MiB: resolver provisioner agent verifier rotator nats-server | store MiB`,
);
console.log(`  (meshctl's own start, \`meshctl --version\`: p50 ${s(floors.sort((a, b) => a - b)[1]!)}, in both meshctl columns)`);
for (const r of rows) {
  const rss = ["resolver", "provisioner", "agent", "verifier", "rotator"].map((k) => mib(r.rss[k] ?? 0).padStart(k.length)).join(" ");
  console.log(
    `  ${String(r.n).padStart(7)} ${`×${(r.n / base.n).toFixed(0)}`.padStart(6)} | ${grew(r.applyMs, base.applyMs).padEnd(22)} | ${grew(r.verifyMs, base.verifyMs).padEnd(22)} | ${grew(r.rotateMs, base.rotateMs).padEnd(22)} | ${rss} ${mib(r.nats).padStart(11)} | ${mib(r.store).padStart(9)}${r.applyExit === 0 ? "" : ` (apply exit ${r.applyExit})`}`,
  );
}
