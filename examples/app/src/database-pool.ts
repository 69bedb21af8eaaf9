/**
 * A `pg.Pool` from one generation of a `postgres.database` grant's values, as the mesh delivers
 * them (docs/reference/bindings.md: `host`, `port`, `database`, `username`, `password`).
 */
import pg from "pg";
import type { CredentialValues } from "@mesh/client";

/** A pool of at most `max` connections logging in with `values`; an idle connection's error is kept from ending the process. */
export function openPool(values: CredentialValues, max: number): pg.Pool {
  const pool = new pg.Pool({
    host: values.host,
    port: Number(values.port),
    database: values.database,
    user: values.username,
    password: values.password,
    max,
    connectionTimeoutMillis: 5_000,
  });
  // pg emits an idle connection's error on the pool, and an unheard `error` event ends the process.
  pool.on("error", () => undefined);
  return pool;
}

/**
 * Proves that `pool` logs in as the generation's user: throws when it does not. The session's
 * user, not `current_user`: the mesh's login roles act as their group role, which owns the
 * database (docs/reference/providers.md), so `current_user` is the same for every generation.
 */
export async function checkPool(pool: pg.Pool, values: CredentialValues): Promise<void> {
  const r = await pool.query<{ user: string }>("select session_user as user");
  if (r.rows[0]?.user !== values.username) throw new Error(`the new pool logged in as ${r.rows[0]?.user}, not as ${values.username}`);
}
