/**
 * The example application, wired: it connects to the mesh's NATS, declares its module (one part
 * and one `postgres.database` requirement), holds the database credential with the SDK, keeps a
 * pool of the generation it holds (follow-credential.ts) and runs a steady query load on it,
 * printing what happens as JSON lines.
 *
 * Its spans are the SDK's: each rotation's CONSUMER span, in the rotation's trace, lasts from
 * the new generation's arrival to `confirm()`, so it covers the pool's check and the old pool's
 * end. They go to whatever tracer provider the process registered (main.ts does).
 */
import { readFileSync } from "node:fs";
import { connect, credsAuthenticator, type NatsConnection } from "@nats-io/transport-node";
import { declare, holdCredential, type CredentialHolder } from "@mesh/client";
import type pg from "pg";
import type { AppOptions } from "./app-options.js";
import { checkPool, openPool } from "./database-pool.js";
import { followCredential, type FollowEvent } from "./follow-credential.js";
import { startLoad, type LoadCounts } from "./query-load.js";

/** One line of the application's output: an event of following the credential, or a status of the load. */
export type AppLine = FollowEvent | { event: "declared"; module: string } | ({ event: "status" | "stopped"; generation: number } & LoadCounts);

/** A running application: `stop()` ends the load, lets its queries finish, and lets go of everything. */
export interface RunningApp {
  /** The load's counts so far. */
  readonly counts: LoadCounts;
  stop(): Promise<LoadCounts>;
}

/**
 * The module the application declares: `module` with `part` on `node`, requiring a PostgreSQL
 * database for that part, whose URL it reads as `DATABASE_URL` (in the part's env file, and in
 * each generation the SDK hands over).
 */
export function appModule(o: Pick<AppOptions, "module" | "part" | "node" | "requirement">) {
  return {
    kind: "Module",
    name: o.module,
    parts: [{ name: o.part, node: o.node }],
    requires: [{ name: o.requirement, kind: "postgres.database", parts: [o.part], env: { DATABASE_URL: "uri" } }],
  };
}

/** Starts the application; `print` receives each line. Resolves once the first pool works and the load runs. */
export async function startApp(o: AppOptions, print: (line: AppLine) => void): Promise<RunningApp> {
  const nc: NatsConnection = await connect({
    servers: o.natsUrl.split(","),
    name: `${o.module}/${o.part}@${o.node}`,
    maxReconnectAttempts: -1,
    ...(o.credsFile ? { authenticator: credsAuthenticator(readFileSync(o.credsFile)) } : {}),
  });
  let holder: CredentialHolder | undefined;
  try {
    // Declaring again what is declared changes nothing (the reply says `unchanged`), so every start declares.
    await declare(nc, [appModule(o)], { source: "examples/app" });
    print({ event: "declared", module: o.module });
    holder = await holdCredential(nc, {
      module: o.module,
      part: o.part,
      node: o.node,
      requirement: o.requirement,
      ...(o.instance ? { instance: o.instance } : {}),
    });
    const following = await followCredential<pg.Pool>(holder, {
      open: (credential) => openPool(credential, o.poolMax),
      check: checkPool,
      onEvent: print,
    });
    const load = startLoad(async () => await following.pools.use(({ pool }) => pool.query("select 1")), o.queryEveryMs);
    const status = setInterval(() => print({ event: "status", generation: following.pools.inUse.generation, ...load.counts }), o.statusEveryMs);
    const h = holder;
    return {
      counts: load.counts,
      async stop() {
        clearInterval(status);
        await load.stop();
        // Not waiting for the iteration: a generation whose pool never passes its check would hold it for ever.
        await h.stop();
        await following.pools.end();
        await nc.drain();
        print({ event: "stopped", generation: following.pools.inUse.generation, ...load.counts });
        return load.counts;
      },
    };
  } catch (e) {
    await holder?.stop().catch(() => undefined);
    await nc.close().catch(() => undefined);
    throw e;
  }
}
