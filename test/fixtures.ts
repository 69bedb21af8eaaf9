/**
 * Plain-data fixtures shared by unit tests: one grant of module `shop` held by two parts on two
 * nodes, and a PostgreSQL provider document. Each test overrides what it is about.
 */
import type { Grant, ModuleDoc, ProviderDoc } from "@mesh/shared";

/** Grant `shop/db` (postgres.database at pg-main, generation 2) targeting api@node-a and worker@node-b. */
export function grantFixture(over: Partial<Grant> = {}): Grant {
  return {
    id: "shop/db",
    module: "shop",
    requirement: "db",
    kind: "postgres.database",
    parts: ["api", "worker"],
    targets: [
      { part: "api", node: "node-a" },
      { part: "worker", node: "node-b" },
    ],
    provider: "pg-main",
    generation: 2,
    resource: {},
    holders: {},
    conditions: [],
    ...over,
  };
}

/** A provider of postgres.database on `node`, installed unless said otherwise. */
export function postgresProvider(name: string, node: string, installed = true): ProviderDoc {
  return { kind: "Provider", name, serves: ["postgres.database"], node, endpoint: "postgres://127.0.0.1:5432", installed };
}

/** The `shop` module of the examples: api on node-a; worker on node-b, not installed. */
export function shopModule(): ModuleDoc {
  return {
    kind: "Module",
    name: "shop",
    parts: [
      { name: "api", node: "node-a", installed: true },
      { name: "worker", node: "node-b", installed: false },
    ],
    requires: [
      { name: "db", kind: "postgres.database", parts: ["api"] },
      { name: "session-key", kind: "secret", parts: ["api", "worker"] },
    ],
  };
}

/** The environment variable through which tests hand a harness PostgreSQL's admin password to the services. */
export const PG_ADMIN_ENV = "PG_TEST_ADMIN_PASSWORD";

/** Provider `pg-main` on node-a for a harness PostgreSQL, its admin password read from {@link PG_ADMIN_ENV}. */
export function harnessProvider(db: { endpoint: string; adminUser: string }, over: Partial<ProviderDoc> = {}): ProviderDoc {
  return {
    kind: "Provider",
    name: "pg-main",
    serves: ["postgres.database"],
    node: "node-a",
    endpoint: db.endpoint,
    admin: { username: db.adminUser, passwordEnv: PG_ADMIN_ENV },
    installed: true,
    ...over,
  };
}

/** The process environment plus the harness PostgreSQL's admin password under {@link PG_ADMIN_ENV}. */
export function adminEnv(db: { adminPassword: string }): NodeJS.ProcessEnv {
  return { ...process.env, [PG_ADMIN_ENV]: db.adminPassword };
}
