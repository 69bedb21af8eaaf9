/**
 * The systemd units in deploy/systemd: each passes `systemd-analyze verify` (templates under an
 * instance name), every service serves its health on a port of its own, and the health check of
 * mesh-health@.service does what it says, run as systemd would run it (its command line with
 * `$$`, `%%` and `%i` expanded) against real HTTP servers, with a `systemctl` that records what it
 * is asked: a service that answers is left alone, one that does not answer within 5 s is
 * restarted, one that is not active is left alone.
 */
import { execFile, spawnSync } from "node:child_process";
import { chmodSync, copyFileSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort } from "./harness/ports.js";

const units = join(import.meta.dirname, "..", "deploy", "systemd");

/** A unit file's name as installed: a template under an instance name. */
const instanceName = (f: string) =>
  f.replace("mesh-agent@.", "mesh-agent@node-a.").replace("mesh-nats@.", "mesh-nats@single.").replace("mesh-health@.", "mesh-health@rotator-9474.");

describe("the systemd units", () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), "mesh-units-"));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("pass systemd-analyze verify", () => {
    if (!existsSync("/usr/bin/systemd-analyze")) throw new Error("systemd-analyze is not installed (Debian's systemd package): the units cannot be verified");
    const files = readdirSync(units).filter((f) => /\.(service|timer)$/.test(f));
    expect(files).toEqual(expect.arrayContaining(["mesh-health@.service", "mesh-health@.timer"]));
    for (const f of files) copyFileSync(join(units, f), join(dir, instanceName(f)));
    for (const f of files) {
      const r = spawnSync("/usr/bin/systemd-analyze", ["verify", join(dir, instanceName(f))], { encoding: "utf8" });
      expect({ unit: f, code: r.status, stderr: r.stderr }).toEqual({ unit: f, code: 0, stderr: "" });
    }
  });

  it("give every service a port of its own for its health, which its health check's instance names", () => {
    const ports = new Map<string, string>();
    for (const f of readdirSync(units).filter((n) => /^mesh-(resolver|provisioner|verifier|rotator|agent@)\b.*\.service$/.test(n))) {
      const text = readFileSync(join(units, f), "utf8");
      const port = /^Environment=MESH_METRICS_LISTEN=127\.0\.0\.1:(\d+)$/m.exec(text)?.[1];
      expect(port, f).toBeDefined();
      expect(text, f).toContain(`mesh-health@`);
      expect(text, f).toContain(`-${port}.timer`);
      ports.set(f, port!);
    }
    expect(new Set(ports.values()).size).toBe(ports.size);
  });
});

describe("mesh-health@.service's check", () => {
  let dir: string;
  let calls: string;
  let healthy: Server;
  let hanging: Server;
  let healthyPort: number;
  let hangingPort: number;
  /** The check's shell script, as systemd hands it to /bin/sh. */
  let script: string;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "mesh-health-"));
    calls = join(dir, "calls");
    // systemctl as the check uses it: is-active answers what FAKE_ACTIVE says; every call is recorded.
    writeFileSync(join(dir, "systemctl"), `#!/bin/sh\necho "$*" >> "${calls}"\nif [ "$1" = is-active ]; then [ "$FAKE_ACTIVE" = yes ]; exit $?; fi\nexit 0\n`);
    chmodSync(join(dir, "systemctl"), 0o755);
    const line = readFileSync(join(units, "mesh-health@.service"), "utf8")
      .split("\n")
      .find((l) => l.startsWith("ExecStart="))!;
    // systemd's expansion: $$ is $, %% is %; the script is the single-quoted argument of sh -c, %i its $0.
    script = line
      .slice(line.indexOf("'") + 1, line.lastIndexOf("'"))
      .replace(/\$\$/g, "$")
      .replace(/%%/g, "%");
    expect(line.trimEnd().endsWith("' %i")).toBe(true);
    healthy = createServer((req, res) => res.writeHead(req.url === "/healthz" ? 200 : 404).end("ok\n"));
    hanging = createServer(() => undefined);
    [healthyPort, hangingPort] = [await freePort(), await freePort()];
    await Promise.all([
      new Promise<void>((r) => healthy.listen(healthyPort, "127.0.0.1", r)),
      new Promise<void>((r) => hanging.listen(hangingPort, "127.0.0.1", r)),
    ]);
  });
  afterAll(async () => {
    healthy?.closeAllConnections();
    hanging?.closeAllConnections();
    await Promise.all([new Promise((r) => healthy?.close(r)), new Promise((r) => hanging?.close(r))]);
    rmSync(dir, { recursive: true, force: true });
  });

  const check = (instance: string, active: boolean) => {
    rmSync(calls, { force: true });
    return new Promise<{ code: number; stdout: string; calls: string[] }>((resolve) => {
      execFile(
        "/bin/sh",
        ["-c", script, instance],
        { env: { PATH: `${dir}:/usr/bin:/bin`, FAKE_ACTIVE: active ? "yes" : "no" }, timeout: 20_000 },
        (err, stdout) => {
          const code = err ? ((err as { code?: number }).code ?? 1) : 0;
          resolve({ code, stdout, calls: existsSync(calls) ? readFileSync(calls, "utf8").trim().split("\n") : [] });
        },
      );
    });
  };

  it("leaves a service that answers alone", async () => {
    const r = await check(`rotator-${healthyPort}`, true);
    expect(r).toEqual({ code: 0, stdout: "", calls: ["is-active --quiet mesh-rotator.service"] });
  });

  it("restarts a service that does not answer within 5 s, and an agent by its node", async () => {
    const r = await check(`rotator-${hangingPort}`, true);
    expect(r.calls).toEqual(["is-active --quiet mesh-rotator.service", "restart mesh-rotator.service"]);
    expect(r.stdout).toContain(`mesh-rotator.service did not answer http://127.0.0.1:${hangingPort}/healthz within 5 s: restarting it`);
    const agent = await check(`agent-node-a-${await freePort()}`, true);
    expect(agent.calls).toEqual(["is-active --quiet mesh-agent@node-a.service", "restart mesh-agent@node-a.service"]);
  }, 30_000);

  it("leaves a service that is not active alone", async () => {
    const r = await check(`verifier-${hangingPort}`, false);
    expect(r).toEqual({ code: 0, stdout: "", calls: ["is-active --quiet mesh-verifier.service"] });
  });
});
