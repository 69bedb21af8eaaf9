/**
 * A `pg.Pool` from one generation of a `postgres.database` grant, as the mesh delivers it: the
 * URL its requirement's `env` names `DATABASE_URL` (the binding's `uri`, see app.ts), the name
 * most applications already read their database from.
 */
import pg from "pg";
import type { CredentialValues, HeldCredential } from "@mesh/client";

/** A pool of at most `max` connections logging in with the generation's credential; an idle connection's error is kept from ending the process. */
export function openPool(credential: Pick<HeldCredential, "env">, max: number): pg.Pool {
  const url = credential.env.DATABASE_URL;
  if (!url) throw new Error("the requirement maps no DATABASE_URL: declare it with env: { DATABASE_URL: uri }");
  const pool = new pg.Pool({ connectionString: url, max, connectionTimeoutMillis: 5_000 });
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
