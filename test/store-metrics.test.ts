/**
 * The mesh's metrics as an operator scrapes them: `meshctl bootstrap` with every service's
 * metrics on (`MESH_METRICS_LISTEN=127.0.0.1:0`), 50 modules with a secret each and two that
 * require nothing, a second verifier and a second rotator started as the first ones were. The
 * store's gauges are reported by one verifier and so counted once; a rotation is counted once
 * across both rotators; the verifiers' checks and the provisioner's generations are counted.
 */
import { existsSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startBootstrappedMesh, type BootstrappedMesh } from "./harness/bootstrapped-mesh.js";
import { startSecondInstances, type SecondInstances } from "./harness/service-instances.js";
import { waitFor } from "./harness/wait.js";

const MODULES = 50;

/** Every sample of `name` in Prometheus text whose labels include all of `labels`. */
function samples(text: string, name: string, labels: Record<string, string> = {}): number[] {
  const out: number[] = [];
  for (const line of text.split("\n")) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)/.exec(line);
    if (!m || m[1] !== name) continue;
    if (Object.entries(labels).every(([k, v]) => (m[2] ?? "").includes(`${k}="${v}"`))) out.push(Number(m[3]));
  }
  return out;
}
const sum = (texts: string[], name: string, labels: Record<string, string> = {}) => texts.flatMap((t) => samples(t, name, labels)).reduce((a, b) => a + b, 0);

/** What a service's log says of its membership, its connection and its failures: the last `n` such lines, shortened. */
function logNotes(logFile: string, n = 8): string {
  if (!existsSync(logFile)) return "(no log)";
  const lines = readFileSync(logFile, "utf8")
    .split("\n")
    .filter((l) => /"level":(40|50|60)|instances: \d|connect/.test(l));
  return lines
    .slice(-n)
    .map((l) => l.slice(0, 240))
    .join(" | ");
}

/** The last metrics address a service's log names (a service restarted onto its identity names a new one). */
function metricsUrlIn(logFile: string): string | undefined {
  let url: string | undefined;
  for (const line of readFileSync(logFile, "utf8").split("\n")) {
    const m = /"url":"(http:\/\/127\.0\.0\.1:\d+)".*serving metrics at/.exec(line);
    if (m) url = m[1];
  }
  return url;
}

describe("the mesh's metrics, scraped from every service with two verifiers and two rotators", () => {
  let mesh: BootstrappedMesh;
  let seconds: SecondInstances | undefined;
  const scrape = async (url: string) => (await fetch(`${url}/metrics`)).text();

  beforeAll(async () => {
    mesh = await startBootstrappedMesh({ nodes: ["node-a", "node-b"], env: { MESH_METRICS_LISTEN: "127.0.0.1:0" } });
    const docs = [
      ...Array.from({ length: MODULES }, (_, i) =>
        ["kind: Module", `name: mod-${i}`, "parts:", "  - { name: api, node: node-a, installed: true }", "requires:", "  - { name: key, kind: secret }"].join(
          "\n",
        ),
      ),
      ...["idle-a", "idle-b"].map((m) => ["kind: Module", `name: ${m}`, "parts:", "  - { name: web, node: node-b, installed: true }"].join("\n")),
    ];
    const file = join(mesh.cwd, "modules.yaml");
    writeFileSync(file, `${docs.join("\n---\n")}\n`);
    const applied = await mesh.meshctl(["apply", "-f", file, "--wait", "--timeout", "180s"]);
    expect(applied.code, applied.stderr).toBe(0);
    // The same programs with the same environment: their metrics on free ports of their own, which their logs name.
    seconds = await startSecondInstances(mesh, ["verifier", "rotator"]);
    const logs = join(mesh.cwd, ".mesh/logs");
    for (const s of ["verifier", "rotator"])
      await waitFor(
        `the second ${s} serving metrics`,
        () => (existsSync(join(logs, `${s}-2.log`)) && metricsUrlIn(join(logs, `${s}-2.log`))) || undefined,
        60_000,
      );
  }, 400_000);
  afterAll(async () => {
    await seconds?.stop();
    await mesh?.stop();
  });

  it("counts the store's grants, modules, agents and credentials once, whichever verifier reports them", { timeout: 240_000 }, async () => {
    const logs = join(mesh.cwd, ".mesh/logs");
    const verifierLogs = ["verifier.log", "verifier-2.log"].map((f) => join(logs, f));
    // Read again at each scrape: a verifier its supervisor started again serves at a new address, which its log names.
    const verifiers = () => verifierLogs.map((f) => metricsUrlIn(f)!);
    // The control plane's master key is a secret of the built-in provider too.
    const secrets = MODULES + 1;
    let seen = "no scrape yet";
    const texts = await waitFor(
      () =>
        `every grant and module counted by the verifiers' scrapes (last seen: ${seen}); their logs: ${verifierLogs.map((f, i) => `verifier ${i + 1}: ${logNotes(f)}`).join("; ")}`,
      async () => {
        const urls = verifiers();
        const t = await Promise.all(
          urls.map((u, i) =>
            scrape(u).catch((e: unknown) => {
              seen = `verifier ${i + 1} did not answer at ${u}: ${(e as Error).message}`;
              throw e;
            }),
          ),
        );
        const provisioned = sum(t, "mesh_grants", { mesh_kind: "secret", mesh_condition: "Provisioned", mesh_status: "True" });
        const ready = sum(t, "mesh_modules", { mesh_state: "Ready" });
        // Each verifier's own counts, so that one that reports an old reading shows which.
        const each = t.map(
          (x, i) =>
            `verifier ${i + 1}: ${sum([x], "mesh_grants", { mesh_kind: "secret", mesh_condition: "Provisioned", mesh_status: "True" })} provisioned, ${sum([x], "mesh_modules", { mesh_state: "Ready" })} Ready`,
        );
        seen = `${provisioned} of ${secrets} secrets provisioned, ${ready} modules Ready, reported by ${t.filter((x) => samples(x, "mesh_grants").length > 0).length} verifiers (${each.join(", ")})`;
        return provisioned === secrets && ready >= MODULES ? t : undefined;
      },
      120_000,
    );
    // One of the two reports the store; the other reports none of it.
    expect(texts.filter((t) => samples(t, "mesh_grants").length > 0)).toHaveLength(1);
    // Each grant once per condition: never more than there are.
    expect(sum(texts, "mesh_grants", { mesh_kind: "secret", mesh_provider: "builtin-secret", mesh_condition: "Resolved" })).toBe(secrets);
    expect(sum(texts, "mesh_modules", { mesh_state: "NothingRequired" })).toBe(2);
    expect(sum(texts, "mesh_modules", { mesh_state: "Ready" })).toBeGreaterThanOrEqual(MODULES);
    for (const node of ["node-a", "node-b"]) {
      const ages = texts.flatMap((t) => samples(t, "mesh_agent_report_age", { mesh_node: node }));
      expect(ages, node).toHaveLength(1);
      expect(ages[0]).toBeLessThan(60);
    }
    expect(texts.flatMap((t) => samples(t, "mesh_credential_age", { mesh_kind: "secret" }))).toHaveLength(1);
    // No name of a module or grant in any series; a node's name only on the agents' gauge.
    for (const t of texts) expect(t).not.toMatch(/mod-\d|idle-a/);
    // Every grant was checked at its provider by one of them.
    await waitFor(
      "the verifiers' checks counted",
      async () => sum(await Promise.all(verifiers().map(scrape)), "mesh_verifications_total", { mesh_kind: "secret", mesh_result: "verified" }) >= MODULES,
      60_000,
    );
  });

  it("counts a rotation once across two rotators, and the provisioner's generations with their duration", async () => {
    const rotated = await mesh.meshctl(["rotate", "mod-0/key", "--wait", "--timeout", "60s"]);
    expect(rotated.code, rotated.stderr).toBe(0);
    const logs = join(mesh.cwd, ".mesh/logs");
    const rotators = ["rotator.log", "rotator-2.log"].map((f) => metricsUrlIn(join(logs, f))!);
    const texts = await waitFor(
      "the commit counted",
      async () => {
        const t = await Promise.all(rotators.map(scrape));
        return sum(t, "mesh_rotations_total", { mesh_kind: "secret", mesh_outcome: "committed" }) >= 1 ? t : undefined;
      },
      15_000,
    );
    expect(sum(texts, "mesh_rotations_total", { mesh_kind: "secret", mesh_outcome: "committed" })).toBe(1);
    expect(sum(texts, "mesh_rotation_duration_count", { mesh_kind: "secret" })).toBe(1);

    const provisioner = await scrape(metricsUrlIn(join(logs, "provisioner.log"))!);
    expect(sum([provisioner], "mesh_provisionings_total", { mesh_kind: "secret", mesh_outcome: "ok" })).toBeGreaterThanOrEqual(MODULES);
    expect(sum([provisioner], "mesh_provisioning_duration_count", { mesh_kind: "secret" })).toBeGreaterThanOrEqual(MODULES);
    // Each service that serves metrics names itself; every service's log names its address.
    const served = readdirSync(logs).filter((f) => f.endsWith(".log") && metricsUrlIn(join(logs, f)));
    expect(served.sort()).toEqual([
      "agent-node-a.log",
      "agent-node-b.log",
      "provisioner.log",
      "resolver.log",
      "rotator-2.log",
      "rotator.log",
      "verifier-2.log",
      "verifier.log",
    ]);
  });
});
