import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { formatProblems, validateDocuments } from "./manifest.js";
import { parseManifestText } from "./manifest-text.js";
import { isValidName } from "../names.js";

const shop = `
kind: Provider
name: pg-main
serves: [postgres.database]
node: node-a
endpoint: postgres://127.0.0.1:5432
admin: { username: postgres, passwordEnv: PG_ADMIN_PASSWORD }
---
kind: Module
name: shop
parts:
  - { name: api, node: node-a }
  - { name: worker, node: node-b, installed: false }
requires:
  - { name: db, kind: postgres.database, parts: [api] }
  - { name: session-key, kind: secret, parts: [api, worker] }
`;

const PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

/** The problems of one Provider document of `serves` with `tls`, as `path: message` lines. */
function tlsProblems(serves: string[], tls: unknown): string[] {
  const r = validateDocuments([{ kind: "Provider", name: "p", serves, node: "node-a", endpoint: "postgres://127.0.0.1:5432", tls }]);
  return r.ok ? [] : r.problems.map((p) => `${p.path}: ${p.message}`);
}

describe("a provider's tls", () => {
  it("takes a PEM bundle or the mesh's own authority, with a name to check", () => {
    expect(tlsProblems(["postgres.database"], { ca: PEM })).toEqual([]);
    expect(tlsProblems(["postgres.database"], { mesh: true, serverName: "db.shop.mesh" })).toEqual([]);
    expect(tlsProblems(["postgres.database"], { ca: PEM, serverName: "10.0.0.7" })).toEqual([]);
  });

  it("refuses a bundle that is not PEM, both sources or none, and a name that is not one", () => {
    expect(tlsProblems(["postgres.database"], { ca: "MIIB" })[0]).toMatch(/^tls.ca: must be a PEM bundle/);
    expect(tlsProblems(["postgres.database"], { ca: PEM, mesh: true })).toEqual([
      "tls: give the authority to verify the server against: either ca (a PEM bundle) or mesh: true (the mesh's own), one of the two",
    ]);
    expect(tlsProblems(["postgres.database"], {})).toHaveLength(1);
    expect(tlsProblems(["postgres.database"], { mesh: true, serverName: "db shop" })[0]).toMatch(/^tls.serverName: must be a DNS name or an IP address/);
  });

  it("sends a NATS provider to its tls:// endpoint and caFile, which verify its servers already", () => {
    const r = validateDocuments([{ kind: "Provider", name: "n", serves: ["nats.user"], node: "node-a", endpoint: "tls://127.0.0.1:4222", tls: { ca: PEM } }]);
    expect(r.ok ? [] : r.problems.map((p) => `${p.path}: ${p.message}`)).toEqual([
      "tls: a NATS server is verified through its endpoint: name its servers tls://host:port and give options.caFile, the bundle that signs their certificates; leave tls out",
    ]);
  });

  it("refuses tls on a kind the mesh would reach without it, rather than serve it in plain text", () => {
    expect(tlsProblems(["postgres.database", "mariadb.database", "redis.user"], { ca: PEM })).toEqual([]);
    expect(tlsProblems(["postgres.database", "secret"], { ca: PEM })).toEqual([
      "tls: the mesh reaches no server of secret that it could verify: serve that kind from a provider without tls (kinds that verify it: postgres.database, mariadb.database, redis.user, rabbitmq.vhost, oci.registry, npm.registry)",
    ]);
  });

  it("verifies the registries over HTTPS, but a registry served from NATS through its endpoint", () => {
    const registry = (endpoint: string) =>
      validateDocuments([{ kind: "Provider", name: "r", serves: ["oci.registry", "npm.registry"], node: "node-a", endpoint, tls: { mesh: true } }]);
    expect(registry("https://registry.shop.mesh:5000").ok).toBe(true);
    const onNats = registry("nats://127.0.0.1:4222");
    expect(onNats.ok ? [] : onNats.problems.map((p) => p.message)).toEqual([expect.stringContaining("name its servers tls://host:port")]);
  });
});

describe("parseManifestText", () => {
  it("accepts the example with defaults filled in", () => {
    const r = parseManifestText(shop);
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.documents).toHaveLength(2);
    expect(r.documents[0]).toMatchObject({ kind: "Provider", installed: true });
    expect(r.documents[1]).toMatchObject({ kind: "Module", parts: [{ installed: true }, { installed: false }] });
  });

  it("accepts JSON, one document or an array", () => {
    expect(parseManifestText(`{"kind":"Module","name":"empty"}`)).toMatchObject({ ok: true, documents: [{ name: "empty", requires: [] }] });
    expect(parseManifestText(`[{"kind":"Module","name":"a"},{"kind":"Module","name":"b"}]`)).toMatchObject({ ok: true });
  });

  it("lists every problem by path, in every document", () => {
    const r = parseManifestText(`
kind: Module
name: shop
parts: [{ name: api, node: node-a }]
requires:
  - { name: db, parts: [api] }
  - { name: 'x"; DROP ROLE postgres; --', kind: secret }
---
kind: Provider
name: pg
serves: [postgres.databse]
node: node-a
endpoint: not a url
extra: 1
`);
    expect(r.ok).toBe(false);
    if (r.ok) return;
    const lines = r.problems.map((p) => `${p.document}:${p.path}:${p.message}`);
    expect(lines).toContain("0:requires[0].kind:required");
    expect(lines.some((l) => l.startsWith("0:requires[1].name:"))).toBe(true);
    expect(lines.some((l) => l.startsWith("1:serves[0]:"))).toBe(true);
    expect(lines.some((l) => l.startsWith("1:endpoint:"))).toBe(true);
    expect(lines).toContain("1::unknown field: extra");
  });

  it("checks references between parts and requirements", () => {
    const r = validateDocuments([
      { kind: "Module", name: "m", parts: [{ name: "api", node: "n" }, { name: "api", node: "n" }], requires: [{ name: "db", kind: "secret", parts: ["nope"] }] },
    ]);
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.problems.map((p) => p.path)).toEqual(["parts[1].name", "requires[0].parts[0]"]);
  });

  it("refuses a module with requirements and no part, and duplicate documents", () => {
    const r = validateDocuments([
      { kind: "Module", name: "m", requires: [{ name: "k", kind: "secret" }] },
      { kind: "Module", name: "m" },
    ]);
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.problems.map((p) => `${p.document}:${p.path}`)).toEqual(["0:parts", "1:name"]);
  });

  it("takes a hook name in a part's onRotate and refuses shell text, saying what to name instead", () => {
    expect(validateDocuments([{ kind: "Module", name: "m", parts: [{ name: "api", node: "n", onRotate: "reload-app" }] }]).ok).toBe(true);
    const r = parseManifestText("kind: Module\nname: m\nparts:\n  - { name: api, node: n, onRotate: systemctl reload x }\n");
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(formatProblems(r.problems)).toBe(
      'document 0: parts[0].onRotate: "systemctl reload x" is not a hook name: name a hook the part\'s node allows (mesh-agent --allow-hook NAME=COMMAND, or meshctl up --allow-hook NAME=COMMAND); a hook name must be 1-40 characters of lower-case letters, digits and inner hyphens, starting with a letter',
    );
    // A long command is quoted in part.
    const long = validateDocuments([{ kind: "Module", name: "m", parts: [{ name: "api", node: "n", onRotate: `sh -c '${"x".repeat(500)}'` }] }]);
    expect(long.ok).toBe(false);
    if (!long.ok) expect(long.problems[0]!.message).toMatch(/^"sh -c 'x{53}…" is not a hook name/);
  });

  it("takes apiVersion mesh/v1 or none, and refuses another naming the one it reads", () => {
    expect(parseManifestText(`apiVersion: mesh/v1\nkind: Module\nname: a`)).toMatchObject({ ok: true, documents: [{ apiVersion: "mesh/v1" }] });
    const r = parseManifestText(`apiVersion: mesh/v2\nkind: Module\nname: a`);
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(formatProblems(r.problems)).toBe("document 0: apiVersion: this mesh reads manifests of apiVersion mesh/v1: write that, or leave apiVersion out");
  });

  it("reports YAML syntax errors and empty files", () => {
    expect(parseManifestText("kind: [unclosed")).toMatchObject({ ok: false });
    expect(parseManifestText("")).toMatchObject({ ok: false, problems: [{ message: "no documents" }] });
    expect(parseManifestText("{not json")).toMatchObject({ ok: false });
  });
});

describe("names", () => {
  it.each(["a", "shop", "session-key", "node-1", "a".repeat(40)])("accepts %s", (n) => expect(isValidName(n)).toBe(true));
  it.each(["", "A", "1a", "a-", "a--b", "a_b", "a.b", "a/b", "a".repeat(41), 'x"; DROP ROLE postgres; --', "a b", "é"])(
    "refuses %j",
    (n) => expect(isValidName(n)).toBe(false),
  );
  it("never accepts a character that is special in a subject, a path, SQL or a shell", () => {
    fc.assert(
      fc.property(fc.string(), (s) => {
        if (isValidName(s)) expect(s).toMatch(/^[a-z0-9-]+$/);
      }),
    );
  });
});
