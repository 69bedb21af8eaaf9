/**
 * Helpers of the verifier's tests: watching a grant's `Verified` condition move, logging in as
 * a holder with the values its agent delivered, and moving a grant to a new generation the way
 * a rotation would.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import pg from "pg";
import { Grant, Verification, getCondition, keys, setCondition, withDeliveredCondition, type Condition, type ProviderDoc } from "@mesh/shared";
import { mutateJson, readJson } from "@mesh/shared/runtime";
import { CredentialStore, createPostgresAdapter, providerConfig } from "@mesh/providers";
import type { TestMesh } from "./mesh.js";
import { waitFor } from "./harness/wait.js";

/** Every distinct `Verified` condition a grant goes through while watched. */
export interface VerifiedWatch {
  readonly seen: Condition[];
  /** Waits until a condition matching `pred` has been seen (at any time since the watch began). */
  until(what: string, pred: (c: Condition) => boolean, timeoutMs: number): Promise<Condition>;
  stop(): void;
}

/** Watches the `Verified` condition of `module/requirement`, recording each change. */
export async function watchVerified(mesh: TestMesh, module: string, requirement: string): Promise<VerifiedWatch> {
  const seen: Condition[] = [];
  const w = await mesh.store.kv.grants.watch({ key: keys.grant(module, requirement) });
  void (async () => {
    for await (const e of w) {
      if (e.operation !== "PUT") continue;
      const c = getCondition(Grant.parse(e.json()).conditions, "Verified");
      const last = seen.at(-1);
      if (c && (!last || last.status !== c.status || last.reason !== c.reason || last.message !== c.message)) seen.push(c);
    }
  })();
  return {
    seen,
    until: (what, pred, timeoutMs) => waitFor(what, () => seen.find(pred), timeoutMs, 20),
    stop: () => w.stop(),
  };
}

/** The grant's `Verified` condition now. */
export async function verifiedOf(mesh: TestMesh, module: string, requirement: string): Promise<Condition | undefined> {
  return getCondition((await mesh.grant(module, requirement))?.conditions ?? [], "Verified");
}

/** Waits until the grant's `Verified` condition matches. */
export function waitVerified(
  mesh: TestMesh,
  module: string,
  requirement: string,
  pred: (c: Condition) => boolean,
  what: string,
  timeoutMs: number,
): Promise<Condition> {
  return waitFor(
    `${module}/${requirement} ${what}`,
    async () => {
      const c = await verifiedOf(mesh, module, requirement);
      return c && pred(c) ? c : undefined;
    },
    timeoutMs,
  );
}

/** The verifier's record of a grant. */
export async function verificationOf(mesh: TestMesh, module: string, requirement: string): Promise<Verification | undefined> {
  return (await readJson(mesh.store.kv.verifications, keys.grant(module, requirement), Verification))?.value;
}

/**
 * Waits for the verifier to check `module/requirement` again after `after` (a `checkedAt` it
 * wrote, or a moment), `times` times over; returns the last check's `checkedAt`. What a test
 * waits for before saying that a check changed nothing.
 */
export async function checkedAfter(mesh: TestMesh, module: string, requirement: string, after: string, timeoutMs: number, times = 1): Promise<string> {
  let at = after;
  for (let n = 1; n <= times; n++) {
    const since = at;
    at = await waitFor(
      `check ${n} of ${times} of ${module}/${requirement} after ${after}`,
      async () => {
        const checked = (await verificationOf(mesh, module, requirement))?.checkedAt;
        return checked !== undefined && checked > since ? checked : undefined;
      },
      timeoutMs,
      20,
    );
  }
  return at;
}

/** Reads a part's delivered binding of a requirement from its node's bindings root. */
export function delivered(mesh: TestMesh, node: string, module: string, part: string, requirement: string): Record<string, string> {
  const dir = join(mesh.bindingsRoot, node, module, part, requirement);
  const read = (k: string) => readFileSync(join(dir, k), "utf8");
  return { host: read("host"), port: read("port"), username: read("username"), password: read("password"), database: read("database") };
}

/** Logs in with delivered values and creates (or reuses) a table, as the holder would; throws PostgreSQL's error otherwise. */
export async function useAsHolder(b: Record<string, string>, table = "probe_table"): Promise<void> {
  const c = new pg.Client({ host: b.host, port: Number(b.port), user: b.username, password: b.password, database: b.database, connectionTimeoutMillis: 3_000 });
  c.on("error", () => {});
  try {
    await c.connect();
    await c.query(`create table if not exists ${table} (id int)`);
    await c.query(`insert into ${table} values (1)`);
  } finally {
    await c.end().catch(() => {});
  }
}

/**
 * Moves a `postgres.database` grant to generation `generation`, as a rotation would but with
 * no rotator and no holder's confirmation, for tests of the verifier alone: the new credential is written to the credential
 * history first, then applied through the provider's admin connection (generation 2 is the
 * grant's other login role), then the grant records it; the provisioner, watching grants,
 * announces it and the agents deliver it. Generation k's role is left as it is.
 */
export async function moveToGeneration(
  mesh: TestMesh,
  provider: ProviderDoc,
  env: NodeJS.ProcessEnv,
  module: string,
  requirement: string,
  generation: number,
): Promise<void> {
  const key = keys.grant(module, requirement);
  const g = (await readJson(mesh.store.kv.grants, key, Grant))!.value;
  const credentials = new CredentialStore(mesh.store.kv.credentials, mesh.masterKey);
  const adapter = createPostgresAdapter(providerConfig(provider, env));
  try {
    const secret = await credentials.ensure(g, generation, g.provider!, () => adapter.generate());
    const r = await adapter.create({ grant: { module, requirement, generation }, secret });
    await credentials.setBindings(module, requirement, generation, r.bindings);
    await mutateJson(mesh.store.kv.grants, key, Grant, (cur) => {
      if (!cur) return undefined;
      const next: Grant = {
        ...cur,
        generation,
        resource: { ...r.resource, provider: cur.provider! },
        conditions: setCondition(cur.conditions, {
          type: "Provisioned",
          status: "True",
          reason: "Provisioned",
          message: `generation ${generation} on ${cur.provider}`,
        }),
      };
      return { ...next, conditions: withDeliveredCondition(next) };
    });
  } finally {
    await adapter.close();
  }
  await waitFor(`${module}/${requirement} generation ${generation} delivered`, async () => {
    const cur = (await readJson(mesh.store.kv.grants, key, Grant))?.value;
    return cur && getCondition(cur.conditions, "Delivered")?.status === "True" && cur.generation === generation ? cur : undefined;
  });
}
