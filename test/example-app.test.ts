/**
 * The example application (examples/app) in a process of its own, on a real mesh: the test's
 * nats-server with the resolver and provisioner in this process, the rotator in a process of its
 * own, and the machine's PostgreSQL (127.0.0.1:5432, trusted local connections) as provider
 * pg-main of examples/providers/postgres.yaml. With the application's query load running, its
 * credential is rotated twice with `meshctl rotate --wait`, and:
 *
 * - no query failed, and queries went on succeeding on each new generation after its rotation;
 * - each old generation was retired (its login role NOLOGIN) only after the application said it
 *   confirms, which it does only once its old pool is ended;
 * - each rotation is one trace from the rotator to the application's holder.
 *
 * The application runs from its sources (tsx), as every process the tests start does, so the
 * test never runs a stale build. Its module is `exampletest` (not the example's default, which a
 * developer may be running against `meshctl up` on this machine): the `exampletest_*` databases
 * and roles on the shared server are dropped before and after.
 */
import { readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseManifestText } from "@mesh/shared/manifest-text";
import { startTestMesh, type TestMesh } from "./mesh.js";
import { runMeshctl } from "./harness/bootstrapped-mesh.js";
import { dropFromSharedPostgres, holdSharedPostgresNames } from "./harness/postgres.js";
import { KIND, startReceiver, type OtlpReceiver } from "./harness/otlp-receiver.js";
import { startProcess, stopProcess, type SourceProcess } from "./harness/source-process.js";
import { waitFor } from "./harness/wait.js";

const repo = join(import.meta.dirname, "..");
const MODULE = "exampletest";
const GRANT = `${MODULE}/db`;
const INSTANCE = "one";
/** The login role of a generation: odd ones `_a`, even ones `_b` (docs/reference/providers.md). */
const roleOf = (generation: number) => `${MODULE}_db_${generation % 2 ? "a" : "b"}`;

/** A line the application printed (examples/app/src/app.ts's `AppLine`, with its time). */
interface Line {
  event: string;
  generation: number;
  now?: number;
  ok?: number;
  failed?: number;
  byGeneration?: Record<string, number>;
  lastError?: string;
}

/** What the test saw of the old generation's role once, and what the application had said by then. */
interface Sample {
  /** The rotation under way, by the generation it moves to. */
  to: number;
  oldCanLogin: boolean;
  /** Generations the application had announced it confirms, read after the role. */
  confirming: number[];
}

/** Everything the rotations under load left to look at. */
interface Evidence {
  lines: Line[];
  samples: Sample[];
  stopped: Line;
}

let mesh: TestMesh;
let receiver: OtlpReceiver;
let rotator: SourceProcess | undefined;
let app: SourceProcess | undefined;
let releaseNames: (() => void) | undefined;

const linesOf = (p: SourceProcess): Line[] =>
  p
    .output()
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l) as Line);

const meshctl = (args: string[]) => runMeshctl(tmpdir(), args, { ...process.env, NO_COLOR: "1", NATS_URL: mesh.nats.url, MESH_NATS_CREDENTIALS: "" });

beforeAll(async () => {
  releaseNames = await holdSharedPostgresNames(MODULE);
  await dropFromSharedPostgres(MODULE);
  receiver = await startReceiver();
  mesh = await startTestMesh({ nodes: [] });
  const provider = parseManifestText(readFileSync(join(repo, "examples/providers/postgres.yaml"), "utf8"));
  if (!provider.ok) throw new Error(`examples/providers/postgres.yaml: ${JSON.stringify(provider.problems)}`);
  expect((await mesh.apply(provider.documents)).ok).toBe(true);
  const otel = { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, OTEL_BSP_SCHEDULE_DELAY: "200" };
  rotator = startProcess([join(repo, "services/rotator/src/main.ts")], {
    NATS_URL: mesh.nats.url,
    MESH_MASTER_KEY: mesh.masterKey.key.toString("hex"),
    ...otel,
  });
  await waitFor("the rotator to start", () => rotator!.output().includes("rotator started"), 40_000).catch((e: Error) => {
    throw new Error(`${e.message}\nrotator:\n${rotator!.output()}`);
  });
}, 90_000);

afterAll(async () => {
  await stopProcess(app);
  await stopProcess(rotator);
  await mesh?.stop();
  await receiver?.close();
  await dropFromSharedPostgres(MODULE);
  releaseNames?.();
});

/**
 * The application started, its load running on generation 1; then two rotations with `meshctl
 * rotate --wait`, the old generation's role sampled throughout; then, once queries succeed on
 * generation 3, the application stopped (it prints its last counts and flushes its spans).
 * Made once, by the first test that asks.
 */
let evidence: Promise<Evidence> | undefined;
const rotatedUnderLoad = () => (evidence ??= rotateTwiceUnderLoad());

async function rotateTwiceUnderLoad(): Promise<Evidence> {
  app = startProcess([join(repo, "examples/app/src/main.ts")], {
    NATS_URL: mesh.nats.url,
    MESH_NATS_CREDENTIALS: "",
    APP_MODULE: MODULE,
    APP_INSTANCE: INSTANCE,
    APP_QUERY_EVERY_MS: "5",
    APP_STATUS_EVERY_MS: "100",
    OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
    OTEL_BSP_SCHEDULE_DELAY: "200",
  });
  const a = app;
  const said = () => `the application printed:\n${a.output()}`;
  /** Waits until a status line after the `index`-th line shows more than `n` queries on `generation`; returns how many. */
  const succeeding = (generation: number, more: number, after = 0) =>
    waitFor(
      () => `queries succeeding on generation ${generation}; ${said()}`,
      () => {
        const statuses = linesOf(a)
          .slice(after)
          .filter((l) => l.event === "status");
        const first = statuses[0]?.byGeneration?.[generation] ?? 0;
        const last = statuses.at(-1)?.byGeneration?.[generation] ?? 0;
        return statuses.length > 1 && last > first + more && last;
      },
      60_000,
    );
  await succeeding(1, 20);

  const admin = new pg.Client({ host: "127.0.0.1", port: 5432, user: "postgres", database: "postgres" });
  await admin.connect();
  const samples: Sample[] = [];
  let to = 2;
  let sampling = true;
  // The role first, then what the application had said: a role seen NOLOGIN before the application announced its confirmation would be a retirement before it.
  const sample = async () => {
    const rotatingTo = to;
    const r = await admin.query<{ rolcanlogin: boolean }>("select rolcanlogin from pg_roles where rolname = $1", [roleOf(rotatingTo - 1)]);
    const confirming = linesOf(a)
      .filter((l) => l.event === "confirming")
      .map((l) => l.generation);
    samples.push({ to: rotatingTo, oldCanLogin: r.rows[0]?.rolcanlogin === true, confirming });
  };
  const sampler = (async () => {
    while (sampling) await sample();
  })();
  try {
    for (to = 2; to <= 3; to++) {
      const before = linesOf(a).length;
      const rotatingTo = to;
      const r = await meshctl(["rotate", GRANT, "--wait"]);
      expect(r.code, `meshctl rotate ${GRANT} --wait:\n${r.stdout}${r.stderr}\n${said()}`).toBe(0);
      // Committed, so the old generation is retired by now: one sample more that must see it.
      await sample();
      // Printed once confirm() has resolved, which may be after the rotator saw the ack.
      const confirmedAt = await waitFor(
        () => `the application to print that it confirmed generation ${to}; ${said()}`,
        () => {
          const i = linesOf(a).findIndex((l, i) => i >= before && l.event === "confirmed" && l.generation === rotatingTo);
          return i >= 0 && i;
        },
      );
      await succeeding(to, 20, confirmedAt);
    }
  } finally {
    sampling = false;
    await sampler;
    await admin.end();
  }
  await stopProcess(a);
  const lines = linesOf(a);
  const stopped = lines.find((l) => l.event === "stopped");
  expect(stopped, said()).toBeDefined();
  return { lines, samples, stopped: stopped! };
}

describe("the example application under a steady load", () => {
  it("loses no query through two rotations, and goes on succeeding on each new generation", { timeout: 240_000 }, async () => {
    const { lines, stopped } = await rotatedUnderLoad();
    const statuses = lines.filter((l) => l.event === "status");
    expect(stopped.failed, `the last failure: ${stopped.lastError}`).toBe(0);
    expect(statuses.filter((s) => s.failed !== 0)).toEqual([]);
    // Every generation served queries, and the counts only grew.
    for (const g of ["1", "2", "3"]) expect(stopped.byGeneration?.[g], `queries on generation ${g}`).toBeGreaterThan(20);
    expect(stopped.ok).toBe(Object.values(stopped.byGeneration!).reduce((x, y) => x + y, 0));
    const oks = statuses.map((s) => s.ok!);
    expect(oks).toEqual([...oks].sort((x, y) => x - y));
    // The application's own story of each move, in order.
    const moves = lines
      .filter((l) => ["in-use", "checked", "old-pool-ended", "confirming", "confirmed"].includes(l.event))
      .map((l) => `${l.event} ${l.generation}`);
    expect(moves).toEqual([
      "in-use 1",
      "checked 2",
      "old-pool-ended 1",
      "confirming 2",
      "confirmed 2",
      "checked 3",
      "old-pool-ended 2",
      "confirming 3",
      "confirmed 3",
    ]);
    expect(stopped.generation).toBe(3);
    expect((await mesh.grant(MODULE, "db"))?.generation).toBe(3);
  });

  it("retires each old generation only after the application confirmed the new one", { timeout: 240_000 }, async () => {
    const { samples } = await rotatedUnderLoad();
    for (const to of [2, 3]) {
      const during = samples.filter((s) => s.to === to);
      // Seen working at the start of the rotation, and seen retired at its end.
      expect(during[0]?.oldCanLogin, `${roleOf(to - 1)} logs in when the rotation to ${to} starts`).toBe(true);
      const retired = during.filter((s) => !s.oldCanLogin);
      expect(retired.length, `${roleOf(to - 1)} seen NOLOGIN once the rotation to ${to} committed`).toBeGreaterThan(0);
      expect(retired.filter((s) => !s.confirming.includes(to))).toEqual([]);
    }
    // At the end, generation 3's role logs in and generation 2's does not.
    const c = new pg.Client({ host: "127.0.0.1", port: 5432, user: "postgres", database: "postgres" });
    await c.connect();
    const roles = await c
      .query<{ rolname: string; rolcanlogin: boolean }>("select rolname, rolcanlogin from pg_roles where rolname like $1 order by rolname", [
        `${MODULE}\\_db\\_%`,
      ])
      .finally(() => c.end());
    expect(roles.rows).toEqual([
      { rolname: roleOf(3), rolcanlogin: true },
      { rolname: roleOf(2), rolcanlogin: false },
    ]);
  });

  it("shows each rotation as one trace from the rotator to the application's holder", { timeout: 240_000 }, async () => {
    await rotatedUnderLoad();
    for (const to of [2, 3]) {
      const rotation = `${GRANT}#${to}`;
      const holder = `node-a/api/${INSTANCE}`;
      const rotate = await waitFor(
        () => `the span of rotation ${rotation}; received: ${receiver.spans.map((s) => `${s.resource["service.name"]} ${s.span.name}`).join(", ")}`,
        () => receiver.spans.find((s) => s.span.name === "rotate" && s.attrs["mesh.rotation"] === rotation),
      );
      // The application's CONSUMER span: its flush at stop may come after the rotator's batch.
      const consumer = await waitFor(`the application's CONSUMER span of ${rotation}`, () =>
        receiver.spans.find((s) => s.span.traceId === rotate.span.traceId && s.span.kind === KIND.consumer && s.attrs["mesh.holder"] === holder),
      );
      const trace = receiver.spans.filter((s) => s.span.traceId === rotate.span.traceId);
      expect([...new Set(trace.map((s) => s.resource["service.name"]))].sort()).toEqual(["example-app", "mesh-rotator"]);
      const producer = trace.find((s) => s.span.spanId === consumer.span.parentSpanId);
      expect(producer?.resource["service.name"]).toBe("mesh-rotator");
      expect(producer?.span.kind).toBe(KIND.producer);
      expect(producer?.span.parentSpanId).toBe(rotate.span.spanId);
      expect(consumer.resource["service.name"]).toBe("example-app");
      expect(consumer.attrs).toMatchObject({ "mesh.rotation": rotation, "mesh.generation": to, "messaging.system": "nats" });
      expect(rotate.attrs).toMatchObject({ "mesh.outcome": "committed", "mesh.to": to });
    }
  });
});
