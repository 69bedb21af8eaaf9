/**
 * The mesh's certificate authority rotated while its holders talk to each other over mutual
 * TLS: part shop/web serves HTTPS with its `tls.certificate` and trusts the bundle delivered with
 * it; part shop/api is its client, with a client certificate of its own and its own bundle,
 * read again at every request, as a client that follows its binding would. `meshctl ca rotate`
 * (its function, on a mesh of the test's own with the rotator in-process) takes the new root
 * through its three steps while api asks every 50 ms: no handshake fails; after each step every
 * grant is where the step puts it (both roots trusted before the new one issues, the old one
 * dropped only once nothing presents it); and at the end both present certificates of the new
 * root, every bundle holds it alone and the old key is gone.
 */
import { X509Certificate } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, realpathSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Kinds, meshCaProvider, type ModuleDoc } from "@mesh/shared";
import { caFiles, certificatesOf, ensureMeshCa, fingerprintOf, type CaFiles } from "@mesh/providers";
import { createLogger } from "@mesh/shared/service";
import { bindingPath } from "@mesh/agent";
import { startRotator, type Rotator } from "@mesh/rotator";
import { ExitCodes, bufferOutput, runCaRotate } from "../packages/cli/src/index.js";
import { startTestMesh, type TestMesh } from "./mesh.js";
import { waitFor } from "./harness/wait.js";
import { askEvery } from "./harness/https-asker.js";

const shop: ModuleDoc = {
  kind: "Module",
  name: "shop",
  parts: [
    { name: "web", node: "node-a", installed: true },
    { name: "api", node: "node-a", installed: true },
  ],
  requires: [
    { name: "serving", kind: Kinds.TlsCertificate, parts: ["web"], options: { lifetime: "1h" } },
    { name: "calling", kind: Kinds.TlsCertificate, parts: ["api"], options: { lifetime: "1h", usage: "client" } },
  ],
};

const dir = mkdtempSync(join(tmpdir(), "mesh-ca-rotation-"));
const files: CaFiles = caFiles(join(dir, "ca"));
let mesh: TestMesh;
let rotator: Rotator | undefined;
let server: Server | undefined;

/** A binding's files, read from the generation directory it points at now. */
function held(part: string, requirement: string): { cert: string; key: string; ca: string } {
  const d = realpathSync(bindingPath(join(mesh.bindingsRoot, "node-a"), "shop", part, requirement));
  const read = (k: string) => readFileSync(join(d, k), "utf8");
  return { cert: read("tls.crt"), key: read("tls.key"), ca: read("ca.crt") };
}
const issuerOf = (pem: string) => new X509Certificate(pem).issuer;

beforeAll(async () => {
  mesh = await startTestMesh({ nodes: ["node-a"] });
  rotator = await startRotator({
    store: mesh.store,
    masterKey: mesh.masterKey,
    log: createLogger("rotator", { destination: mesh.logs, level: "debug" }),
    sweepMs: 500,
  });
  await ensureMeshCa(files, mesh.masterKey);
  expect((await mesh.apply([meshCaProvider({ node: "node-a", certFile: files.certFile, keyFile: files.keyFile }), shop])).ok).toBe(true);
  for (const [part, r] of [
    ["web", "serving"],
    ["api", "calling"],
  ] as const) {
    await waitFor(`shop/${r} delivered to node-a/${part}`, async () => (await mesh.grant("shop", r))?.holders[`node-a/${part}`]?.generation === 1, 30_000);
  }
}, 60_000);

afterAll(async () => {
  await new Promise<void>((r) => (server ? server.close(() => r()) : r()));
  await rotator?.stop();
  await mesh?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe("meshctl ca rotate", () => {
  it("moves every holder to a new root with no failed mutual-TLS handshake, and the old root is trusted nowhere", async () => {
    const oldRoot = fingerprintOf(certificatesOf(readFileSync(files.certFile, "utf8"))[0]!);
    let serving = held("web", "serving");
    server = createServer({ cert: serving.cert, key: serving.key, ca: serving.ca, requestCert: true, rejectUnauthorized: true }, (_req, res) => res.end("ok"));
    await new Promise<void>((r) => server!.listen(0, "127.0.0.1", r));
    const port = (server.address() as { port: number }).port;
    const reload = setInterval(() => {
      const next = held("web", "serving");
      if (next.cert !== serving.cert || next.ca !== serving.ca) {
        server!.setSecureContext({ cert: next.cert, key: next.key, ca: next.ca });
        serving = next;
      }
    }, 50);

    const serverIssuers = new Set<string>();
    const asker = askEvery(
      50,
      () => {
        const calling = held("api", "calling");
        return { host: "127.0.0.1", port, servername: "web.shop.mesh", ca: calling.ca, cert: calling.cert, key: calling.key };
      },
      (c) => serverIssuers.add(String(c.issuer.CN)),
    );

    const out = bufferOutput();
    let code: number;
    try {
      code = await runCaRotate(mesh.store, files, { masterKey: mesh.masterKey, timeoutMs: 120_000, rotationTimeoutMs: 30_000, json: true }, out);
      // The server reloads within 50 ms of its binding changing: a few more requests on the new files.
      const after = asker.sent();
      await waitFor("requests on the final files", () => asker.sent() > after + 5);
    } finally {
      await asker.stop();
      clearInterval(reload);
    }
    expect(asker.failures).toEqual([]);
    expect(out.stderr).toBe("");
    expect(code).toBe(ExitCodes.Ok);
    type After = Record<string, { authority: string; trusts: string }>;
    const report = JSON.parse(out.stdout) as {
      from: string;
      to: string;
      steps: Array<{ step: number; rotations: Array<{ grant: string; exitCode: number }>; after: After }>;
    };
    expect(report.from).toBe(oldRoot);
    expect(report.to).not.toBe(oldRoot);
    expect(report.steps.map((s) => s.step)).toEqual([1, 2, 3]);
    const each = (after: After, authority: string, trusts: string) =>
      expect(after).toEqual({ "shop/calling": { authority, trusts }, "shop/serving": { authority, trusts } });
    const both = `${oldRoot},${report.to}`;
    each(report.steps[0]!.after, oldRoot, both);
    each(report.steps[1]!.after, report.to, both);
    each(report.steps[2]!.after, report.to, report.to);
    for (const s of report.steps)
      expect(
        s.rotations
          .filter((r) => r.exitCode === ExitCodes.Ok)
          .map((r) => r.grant)
          .sort(),
      ).toEqual(["shop/calling", "shop/serving"]);

    expect(asker.sent()).toBeGreaterThan(10);
    // Both roots served certificates while the test asked; the files name the new one alone.
    expect(serverIssuers.size).toBe(2);
    const bundle = certificatesOf(readFileSync(files.certFile, "utf8"));
    expect(bundle.map(fingerprintOf)).toEqual([report.to]);
    expect(existsSync(files.nextKeyFile)).toBe(false);
    for (const [part, r] of [
      ["web", "serving"],
      ["api", "calling"],
    ] as const) {
      const h = held(part, r);
      expect(certificatesOf(h.ca).map(fingerprintOf)).toEqual([report.to]);
      expect(issuerOf(h.cert)).toBe(bundle[0]!.subject);
      expect((await mesh.grant("shop", r))?.resource).toMatchObject({ authority: report.to, trusts: report.to });
    }
  }, 180_000);
});
