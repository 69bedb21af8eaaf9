/**
 * `meshctl rotate` and `meshctl trace` against a whole mesh on its own nats-server (resolver,
 * provisioner, an agent on node-a, and the rotator in-process): a `secret` grant held by the
 * agent rotates to Committed with `--wait --json`, its trace shows the holder's timeline, and
 * the failures a user can hit (no such grant, one already rotating, no rotator) have their own
 * exit codes and say what to do.
 */
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Kinds, Rotation, RotationStates, holderEndpoint, keys, type HolderRegistration, type ModuleDoc } from "@mesh/shared";
import { createLogger } from "@mesh/shared/service";
import { startRotator, type Rotator } from "@mesh/rotator";
import { ExitCodes, bufferOutput, runRotate, runStatus, runTrace, type RotationSummary, type RotationTrace } from "../packages/cli/src/index.js";
import { startTestMesh, type TestMesh } from "./mesh.js";
import { waitFor } from "./harness/wait.js";
import { exitOf } from "./harness/cli-exit.js";

const repo = fileURLToPath(new URL("..", import.meta.url));
let mesh: TestMesh;
let rotator: Rotator | undefined;

const shop: ModuleDoc = {
  kind: "Module",
  name: "shop",
  parts: [{ name: "api", node: "node-a", installed: true }],
  // One grant per test, so each runs alone: its rotations are numbered from #2 whatever ran before.
  requires: ["waited", "traced", "unwaited", "tty", "unknown", "stalled", "token"].map((name) => ({ name, kind: Kinds.Secret, parts: ["api"] })),
};

const startRotatorHere = () =>
  startRotator({
    store: mesh.store,
    masterKey: mesh.masterKey,
    log: createLogger("rotator", { destination: mesh.logs, level: "debug" }),
    sweepMs: 500,
  });

/** `meshctl rotate shop/REQUIREMENT --wait --json`, to Committed. */
async function rotated(requirement: string): Promise<RotationSummary> {
  const out = bufferOutput();
  const code = await runRotate(mesh.store, { grant: `shop/${requirement}`, wait: true, json: true, timeoutMs: 20_000 }, out);
  expect(out.stderr).toBe("");
  expect(code).toBe(ExitCodes.Ok);
  return JSON.parse(out.stdout) as RotationSummary;
}

beforeAll(async () => {
  mesh = await startTestMesh({ nodes: ["node-a"] });
  rotator = await startRotatorHere();
  expect((await mesh.apply([shop])).ok).toBe(true);
  await mesh.waitForState("shop", "Ready");
  for (const r of shop.requires)
    await waitFor(`node-a/api holding generation 1 of shop/${r.name}`, async () => (await mesh.grant("shop", r.name))?.holders["node-a/api"]?.generation === 1);
});

afterAll(async () => {
  await rotator?.stop();
  await mesh?.stop();
});

describe("meshctl rotate --wait --json and meshctl trace", () => {
  it("rotates the secret grant to Committed, listing the holder with its confirmation time", async () => {
    const summary = await rotated("waited");
    expect(summary).toMatchObject({ rotation: "shop/waited#2", grant: "shop/waited", from: 1, to: 2, state: RotationStates.Committed, missing: [] });
    expect(summary.holders.map((h) => h.holder)).toEqual(["node-a/api"]);
    expect(Date.parse(summary.holders[0]!.confirmedAt!)).toBeGreaterThanOrEqual(Date.parse(summary.requestedAt));
    const g = await mesh.grant("shop", "waited");
    expect(g?.generation).toBe(2);
    expect(g?.holders["node-a/api"]?.generation).toBe(2);
  });

  it("traces a rotation: the holder's confirmation as the server recorded its ack, on which stream and consumer, of which sequence", async () => {
    const summary = await rotated("traced");
    const json = bufferOutput();
    expect(await runTrace(mesh.store, { rotation: summary.rotation, json: true }, json)).toBe(ExitCodes.Ok);
    const t = JSON.parse(json.stdout) as RotationTrace;
    expect(t.states.map((s) => s.state)).toEqual(["Staged", "Broadcast", "AwaitingHolders", "Committed"]);
    const h = t.holders[0]!;
    expect(h.holder).toBe("node-a/api");
    expect(h.confirmed).toBeTruthy();
    expect(h.confirmed!.at).toBe(summary.holders[0]!.confirmedAt);
    const e = holderEndpoint("shop/traced", "node-a/api")!;
    expect(h).toMatchObject({ stream: e.stream, consumer: e.consumer });
    expect(summary.holders[0]).toMatchObject({ stream: e.stream, consumer: e.consumer, ackedSeq: h.ackedSeq });
    expect((await mesh.store.jsm.consumers.info(e.stream, e.consumer)).ack_floor.stream_seq).toBeGreaterThanOrEqual(h.ackedSeq!);

    const text = bufferOutput();
    expect(await runTrace(mesh.store, { rotation: "shop/traced#2" }, text)).toBe(ExitCodes.Ok);
    expect(text.stdout).toContain("rotation shop/traced#2  generation 1 → 2  Committed");
    expect(text.stdout).toMatch(
      /node-a\/api\n {4}confirmed +\+\d+\.\d{3} s {2}\S+Z {2}server's clock\n {4}acknowledged seq \d+ on consumer shop_traced_api of stream MESH_HOLD_N_node-a/,
    );
    expect(h.confirmed!.clock).toBe("server");
  });

  it("without --wait prints the started rotation; the built meshctl traces it by its grant", async () => {
    const out = bufferOutput();
    expect(await runRotate(mesh.store, { grant: "shop/unwaited" }, out)).toBe(ExitCodes.Ok);
    expect(out.stdout).toContain("rotation shop/unwaited#2 started: grant shop/unwaited, generation 1 → 2; 1 holder must confirm");
    // The record, not the grant: the grant moves to generation 2 just before the record says Committed.
    await waitFor("shop/unwaited#2 committed", async () => {
      const e = await mesh.store.kv.rotations.get(keys.grant("shop", "unwaited"));
      const r = e?.operation === "PUT" ? Rotation.parse(e.json()) : undefined;
      return r?.id === "shop/unwaited#2" && r.state === RotationStates.Committed;
    });
    const r = spawnSync(process.execPath, [join(repo, "packages/cli/bin/meshctl.js"), "trace", "shop/unwaited", "--json"], {
      env: { ...process.env, NO_COLOR: "1", NATS_URL: mesh.nats.url },
      encoding: "utf8",
      timeout: 30_000,
    });
    expect(r.stderr).toBe("");
    expect(r.status).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ rotation: "shop/unwaited#2", state: "Committed" });
  });

  it("with --wait on a terminal, redraws the progress line, then prints the outcome", async () => {
    const out = bufferOutput({ isTTY: true });
    expect(await runRotate(mesh.store, { grant: "shop/tty", wait: true }, out)).toBe(ExitCodes.Ok);
    expect(out.stdout).toContain("rotation shop/tty#2 started: grant shop/tty, generation 1 → 2; 1 holder must confirm");
    expect(out.stdout).toContain("\r\x1b[2Kconfirmed 1/1 holder\n");
    expect(out.stdout.replace(/\s+/g, " ")).toMatch(
      /Committed: rotation shop\/tty#2, 1\/1 holders confirmed in [\d.]+ m?s; grant shop\/tty is on generation 2/,
    );
  });

  it("says a rotation or grant it does not know, with its own exit codes", async () => {
    await rotated("unknown");
    const unknownRotation = await exitOf(() => runTrace(mesh.store, { rotation: "shop/unknown#9" }, bufferOutput()));
    expect(unknownRotation.code).toBe(ExitCodes.NotFound);
    expect(unknownRotation.message).toContain("no rotation shop/unknown#9 is recorded");
    expect(unknownRotation.message).toContain("meshctl trace shop/unknown#2");
    const neverRotated = await exitOf(() => runTrace(mesh.store, { rotation: "shop/nope#2" }, bufferOutput()));
    expect(neverRotated).toMatchObject({ code: ExitCodes.NotFound });
    expect(neverRotated.message).toContain("grant shop/nope has never been rotated");
    const badId = await exitOf(() => runRotate(mesh.store, { grant: "shop" }, bufferOutput()));
    expect(badId.code).toBe(ExitCodes.Usage);
    expect(badId.message).toContain("is not a grant id");
    const unknownGrant = await exitOf(() => runRotate(mesh.store, { grant: "shop/nope" }, bufferOutput()));
    expect(unknownGrant.code).toBe(ExitCodes.NotFound);
    expect(unknownGrant.message).toContain("grant shop/nope does not exist");
  });

  it("with --wait, exits 8 on a stall naming the missing holder; a second rotation is refused naming the running one; status shows it", async () => {
    // An SDK instance registered for api that never confirms (its process went away without deregistering).
    const seen = new Date().toISOString();
    const ghost: HolderRegistration = {
      holder: "node-a/api/ghost",
      grant: "shop/stalled",
      node: "node-a",
      part: "api",
      instance: "ghost",
      registeredAt: seen,
      seenAt: seen,
    };
    await mesh.store.kv.holders.put(keys.holder("shop", "stalled", "node-a", "api", "ghost"), JSON.stringify(ghost));
    const out = bufferOutput();
    expect(await runRotate(mesh.store, { grant: "shop/stalled", wait: true, timeoutMs: 1_500 }, out)).toBe(ExitCodes.RotationStalled);
    const lines = out.stdout.split("\n");
    expect(lines).toContain("confirmed 1/2 holders");
    const text = out.stdout.replace(/\s+/g, " ");
    expect(text).toContain("Stalled: rotation shop/stalled#2, 1 of 2 holders have not confirmed generation 2");
    expect(text).toContain("node-a/api/ghost");
    expect(text).toContain("Generation 1 keeps working");

    const busy = await exitOf(() => runRotate(mesh.store, { grant: "shop/stalled", wait: true }, bufferOutput()));
    expect(busy.code).toBe(ExitCodes.AlreadyRotating);
    expect(busy.message).toContain("grant shop/stalled is already rotating: rotation shop/stalled#2 (generation 1 → 2) is Stalled, 1/2 holders confirmed");

    const status = bufferOutput();
    expect(await runStatus(mesh.store, { module: "shop", json: true }, status)).toBe(ExitCodes.Ok);
    const grant = (JSON.parse(status.stdout) as { modules: Array<{ grants: Array<Record<string, unknown>> }> }).modules[0]!.grants.find(
      (g) => g.id === "shop/stalled",
    )!;
    expect(grant.rotation).toMatchObject({ id: "shop/stalled#2", state: "Stalled", confirmed: 1, total: 2, missing: ["node-a/api/ghost"] });
    expect(grant.generation).toBe(1);
    const human = bufferOutput();
    await runStatus(mesh.store, { module: "shop" }, human);
    expect(human.stdout).toContain("rotating 1→2: confirmed 1/2 holders  Stalled shop/stalled#2");
    expect(human.stdout).toContain("missing: node-a/api/ghost");

    const trace = bufferOutput();
    expect(await runTrace(mesh.store, { rotation: "shop/stalled#2" }, trace)).toBe(ExitCodes.Ok);
    expect(trace.stdout).toContain("node-a/api/ghost  not confirmed");
  });

  it("says how to start the rotator when none runs", async () => {
    await rotator!.stop();
    rotator = undefined;
    try {
      const none = await exitOf(() => runRotate(mesh.store, { grant: "shop/token" }, bufferOutput()));
      expect(none.code).toBe(ExitCodes.ServiceUnavailable);
      expect(none.message).toContain("the rotator is not running, so nothing was rotated");
      expect(none.message).toContain("node services/rotator/dist/main.js");
    } finally {
      rotator = await startRotatorHere();
    }
  });
});
