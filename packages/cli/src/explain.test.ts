import { describe, expect, it } from "vitest";
import type { Grant, ModuleDoc } from "@mesh/shared";
import { explainModule, type ExplainInput } from "./explain.js";
import { formatExplanation } from "./explain-format.js";
import { shopModule } from "../../../test/fixtures.js";
import { NOW, ago, cond, grant, moduleStatus, nodeA, pgMain, readyDb } from "./test-fixtures.js";

const shopDoc: ModuleDoc = shopModule();

function explainOne(g: Grant | undefined, over: Partial<ExplainInput> = {}) {
  const base = over.manifest?.doc ?? shopDoc;
  const doc: ModuleDoc = { ...base, requires: base.requires.filter((r) => r.name === (g?.requirement ?? "db")) };
  const e = explainModule({
    status: moduleStatus(),
    grants: g ? [g] : [],
    providers: [pgMain],
    nodes: [nodeA],
    now: NOW,
    ...over,
    manifest: { doc, revision: 3 },
  });
  expect(e.requirements).toHaveLength(1);
  return e.requirements[0]!;
}

const resolvedDb = cond("Resolved", "True", "ProviderSelected", "provider pg-main (node node-a)");

describe("explainModule, one requirement at a time", () => {
  const cases: Array<{ name: string; grant: Grant | undefined; over?: Partial<ExplainInput>; state: string; why: RegExp; next?: RegExp; detail?: RegExp }> = [
    {
      name: "no grant yet",
      grant: undefined,
      state: "InProgress",
      why: /resolver has not written a grant/,
      next: /resolver\.log/,
    },
    {
      name: "NoProvider",
      grant: grant({ requirement: "db", provider: null, conditions: [cond("Resolved", "False", "NoProvider", "no provider serves postgres.database")] }),
      over: { providers: [] },
      state: "Unsatisfiable",
      why: /^no provider serves postgres\.database$/,
      next: /apply a Provider document with `serves: \[postgres\.database\]` \(see examples\/providers\/postgres\.yaml\)/,
    },
    {
      name: "AwaitingDependency says what it waits for, and that it moves on by itself",
      grant: grant({
        requirement: "db",
        provider: null,
        conditions: [
          cond("Resolved", "False", "AwaitingDependency", "waiting: pg-in-mesh needs store/key, not provisioned yet; it moves on by itself once they are"),
        ],
      }),
      state: "InProgress",
      why: /pg-in-mesh needs store\/key/,
      next: /nothing to do if those grants are on their way/,
    },
    {
      name: "DependencyCycle is unsatisfiable and says how to break it",
      grant: grant({
        requirement: "db",
        provider: null,
        conditions: [
          cond("Resolved", "False", "DependencyCycle", "shop/db can never be provisioned: it waits for itself through shop/db → store/files → shop/db"),
        ],
      }),
      state: "Unsatisfiable",
      why: /shop\/db → store\/files → shop\/db/,
      next: /break the cycle/,
    },
    {
      name: "NoProvider of a kind with an example file points at it",
      grant: grant({
        requirement: "db",
        kind: "redis.user",
        provider: null,
        conditions: [cond("Resolved", "False", "NoProvider", "no provider serves redis.user")],
      }),
      over: { providers: [] },
      state: "Unsatisfiable",
      why: /^no provider serves redis\.user$/,
      next: /examples\/providers\/redis\.yaml/,
    },
    {
      name: "ProviderNotInstalled names the provider and says to install it",
      grant: grant({ requirement: "db", provider: null, conditions: [cond("Resolved", "False", "ProviderNotInstalled", "…")] }),
      over: { providers: [{ ...pgMain, installed: false }] },
      state: "Unsatisfiable",
      why: /served by pg-main \(node node-a\), but it is not installed/,
      next: /set `installed: true` in the Provider document of pg-main and re-apply it/,
    },
    {
      name: "no installed part",
      grant: grant({
        requirement: "session-key",
        kind: "secret",
        parts: ["api", "worker"],
        targets: [],
        provider: "builtin-secret",
        conditions: [cond("Resolved", "True", "ProviderSelected", "provider builtin-secret (built in)")],
      }),
      over: { manifest: { doc: { ...shopDoc, parts: shopDoc.parts.map((p) => ({ ...p, installed: false })) }, revision: 3 } },
      state: "Dormant",
      why: /none of its parts \(api \(node node-a\), worker \(node node-b\)\) is installed/,
      next: /set `installed: true` on one of those parts in the manifest of shop/,
    },
    {
      name: "waiting for the provisioner",
      grant: grant({ requirement: "db", conditions: [resolvedDb] }),
      state: "InProgress",
      why: /provider pg-main was chosen; waiting for the provisioner/,
      next: /provisioner\.log/,
    },
    {
      name: "provisioning failed",
      grant: grant({
        requirement: "db",
        conditions: [resolvedDb, cond("Provisioned", "False", "ProvisionFailed", "connection refused at 127.0.0.1:5432")],
      }),
      state: "Failing",
      why: /provisioning failed: connection refused at 127\.0\.0\.1:5432/,
      next: /retries by itself/,
    },
    {
      name: "waiting for an agent that is not registered",
      grant: grant({
        requirement: "db",
        generation: 1,
        targets: [{ part: "api", node: "node-c" }],
        conditions: [resolvedDb, cond("Provisioned", "True", "Provisioned", "ok"), cond("Delivered", "False", "AwaitingDelivery", "…")],
      }),
      state: "InProgress",
      why: /waiting for delivery: no agent is registered for node node-c \(part api\)/,
      next: /MESH_NODE=node-c .*node services\/agent\/dist\/main\.js/,
    },
    {
      name: "waiting for a registered agent",
      grant: grant({
        requirement: "db",
        generation: 1,
        conditions: [resolvedDb, cond("Provisioned", "True", "Provisioned", "ok"), cond("Delivered", "False", "AwaitingDelivery", "…")],
      }),
      state: "InProgress",
      why: /the agent of node node-a is registered \(last seen 3 s ago\) but has not written generation 1 for part api yet/,
      next: /agent-<node>\.log/,
    },
    {
      name: "Ready says what was delivered where",
      grant: readyDb,
      state: "Satisfied",
      why: /provider pg-main provisioned generation 1/,
      detail: /generation 1 delivered to api on node node-a 30 s ago, files in \/srv\/mesh\/bindings\/node-a\/shop\/api\/db\//,
    },
    {
      name: "Provisioned AwaitingDependency: waits on its provider's admin secret, and says the mesh moves it on",
      grant: grant({
        requirement: "db",
        conditions: [
          resolvedDb,
          cond(
            "Provisioned",
            "False",
            "AwaitingDependency",
            "waiting for the admin password of provider pg-main, a mesh secret: provider pg-main: the server at postgres://127.0.0.1:5433 accepts generation 1 of pg/admin-password; the mesh holds 2; …",
          ),
        ],
      }),
      state: "InProgress",
      why: /provider pg-main was chosen, but it is waiting for the admin password of provider pg-main, a mesh secret: .*accepts generation 1 of pg\/admin-password; the mesh holds 2/,
      next: /moves on once it has; otherwise run the command named above/,
    },
    {
      name: "a secret whose server holds an older generation, under repair: report, names the command",
      grant: grant({
        ...readyDb,
        requirement: "session-key",
        id: "shop/session-key",
        kind: "secret",
        provider: "builtin-secret",
        repair: "report",
        conditions: [
          ...readyDb.conditions,
          cond(
            "Verified",
            "False",
            "CredentialDiverged",
            "provider pg-main: the server at postgres://127.0.0.1:5433 accepts generation 1 of shop/session-key; the mesh holds 2; …",
          ),
        ],
      }),
      state: "Failing",
      why: /verification failed \(CredentialDiverged\): provider pg-main: the server at/,
      next: /run `meshctl verify shop\/session-key --repair` to set the current generation there/,
    },
    {
      name: "a part that is not installed is named as left out",
      grant: grant({
        ...readyDb,
        requirement: "session-key",
        id: "shop/session-key",
        kind: "secret",
        parts: ["api", "worker"],
        provider: "builtin-secret",
      }),
      state: "Satisfied",
      why: /the built-in provider builtin-secret provisioned generation 1/,
      detail: /not delivered to worker \(node node-b\): that part is not installed/,
    },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const r = explainOne(c.grant, c.over);
      expect(r.state).toBe(c.state);
      expect(r.satisfied).toBe(c.state === "Satisfied");
      expect(r.why).toMatch(c.why);
      if (c.next) expect(r.next).toMatch(c.next);
      if (c.detail) expect(r.details.join("\n")).toMatch(c.detail);
    });
  }
});

describe("explainModule, the module as a whole", () => {
  it("says a module that requires nothing is ready as it is, as a recorded state", () => {
    const e = explainModule({
      status: moduleStatus({ module: "static-site", state: "NothingRequired", message: "the module declares no requirement", requirements: 0 }),
      manifest: { doc: { kind: "Module", name: "static-site", parts: [], requires: [] }, revision: 3 },
      grants: [],
      providers: [],
      nodes: [],
      now: NOW,
    });
    expect(e.requirements).toEqual([]);
    expect(e.notes.join(" ")).toMatch(/declares no requirement.*recorded state: the resolver processed its manifest 10 s ago/);
  });

  it("notes a stored manifest newer than the one processed", () => {
    const e = explainModule({
      status: moduleStatus({ manifestRevision: 2 }),
      manifest: { doc: shopDoc, revision: 5 },
      grants: [readyDb],
      providers: [pgMain],
      nodes: [nodeA],
      now: NOW,
    });
    expect(e.notes.join(" ")).toContain("revision 5) is newer than the one last processed (revision 2)");
    expect(e.requirements.map((r) => r.requirement)).toEqual(["db", "session-key"]);
  });

  it("formats every requirement with why, next and details, within 80 columns", () => {
    const e = explainModule({
      status: moduleStatus(),
      manifest: { doc: shopDoc, revision: 3 },
      grants: [
        readyDb,
        grant({
          requirement: "session-key",
          kind: "secret",
          parts: ["api", "worker"],
          provider: "builtin-secret",
          conditions: [cond("Resolved", "True", "ProviderSelected", "x")],
        }),
      ],
      providers: [pgMain],
      nodes: [nodeA],
      now: NOW,
    });
    const text = formatExplanation(e);
    expect(text).toContain("db (postgres.database, for api): satisfied");
    expect(text).toContain("session-key (secret, for api, worker): in progress");
    expect(text).toMatch(/\n {2}why: {2}the built-in provider builtin-secret was chosen;/);
    expect(text).toMatch(/\n {2}- generation 1 delivered to api on node node-a 30 s ago/);
    for (const line of text.split("\n")) expect(line.length).toBeLessThanOrEqual(80);
    expect(ago(0)).toBe(NOW.toISOString());
  });
});
