import { describe, expect, it } from "vitest";
import { ModuleDoc, ProviderDoc } from "@mesh/shared";
import { partOfApplySubject, selfDeclarationProblems } from "./apply.js";

const stored = ModuleDoc.parse({
  kind: "Module",
  name: "shop",
  parts: [
    { name: "api", node: "n1" },
    { name: "worker", node: "n2" },
  ],
  requires: [
    { name: "db", kind: "postgres.database" },
    { name: "key", kind: "secret", parts: ["api", "worker"] },
    { name: "apikey", kind: "secret", parts: ["api"] },
    { name: "bus", kind: "nats.user", parts: ["api"] },
  ],
  allowKinds: ["secret"],
});
const provider = ProviderDoc.parse({ kind: "Provider", name: "evil", serves: ["secret"], node: "n1", endpoint: "builtin://x" });
const again = (over: Partial<ModuleDoc>) => ModuleDoc.parse({ ...stored, ...over });
const api = { module: "shop", node: "n1", part: "api" };
const worker = { module: "shop", node: "n2", part: "worker" };
const without = (...names: string[]) => stored.requires.filter((r) => !names.includes(r.name));

describe("what a part may declare on its own subject", () => {
  it("accepts its module with the operator's parts and allowKinds, its own requirement of an allowed kind added, changed or removed, the others as they were", () => {
    expect(selfDeclarationProblems([again({ requires: [...stored.requires, { name: "token", kind: "secret", parts: ["worker"] }] })], worker, stored)).toEqual(
      [],
    );
    expect(selfDeclarationProblems([again({ requires: without("apikey") })], api, stored)).toEqual([]);
    expect(
      selfDeclarationProblems([again({ requires: stored.requires.map((r) => (r.name === "key" ? { ...r, options: { length: 48 } } : r)) })], worker, stored),
    ).toEqual([]);
    expect(selfDeclarationProblems([stored], worker, stored)).toEqual([]);
  });

  it("refuses a module the operator has not declared, another module, a Provider, and a part the module does not have there", () => {
    expect(selfDeclarationProblems([stored], api, undefined)[0]?.message).toMatch(/has not been declared by the operator yet/);
    const p = selfDeclarationProblems([stored, provider, again({ name: "other" })], api, stored);
    expect(p.map((x) => [x.document, x.path])).toEqual([
      [1, "kind"],
      [2, "name"],
    ]);
    expect(selfDeclarationProblems([stored], { ...api, node: "n2" }, stored)[0]?.message).toMatch(/has no part api on node n2/);
  });

  it("refuses a sibling's requirements and kinds outside allowKinds, added, changed or removed, naming each and the rule", () => {
    // Part worker declares shop without apikey and bus: both are api's alone, and bus is a kind outside allowKinds.
    const p = selfDeclarationProblems([again({ requires: without("apikey", "bus") })], worker, stored);
    expect(p.map((x) => x.message)).toEqual([
      "part worker may not remove requirement apikey: it is not among its parts (api), and a part may change only the requirements it is in",
      "part worker may not remove requirement bus, a nats.user: the operator allows module shop's parts to declare secret (the module's allowKinds)",
    ]);
    // Changing one, or taking it over by adding itself to its parts: refused.
    const taken = selfDeclarationProblems(
      [again({ requires: stored.requires.map((r) => (r.name === "apikey" ? { ...r, parts: ["api", "worker"] } : r)) })],
      worker,
      stored,
    );
    expect(taken.map((x) => x.path)).toEqual(["requires[2]"]);
    // A requirement of another part only, added: refused.
    expect(
      selfDeclarationProblems([again({ requires: [...stored.requires, { name: "t", kind: "secret", parts: ["api"] }] })], worker, stored)[0]?.message,
    ).toMatch(/may not add requirement t: it is not among its parts/);
    // The operator's requirement of every part, of a kind outside allowKinds: not the part's to change.
    expect(selfDeclarationProblems([again({ requires: without("db") })], api, stored)[0]?.message).toMatch(
      /may not remove requirement db, a postgres\.database/,
    );
  });

  it("refuses other parts and other allowKinds", () => {
    const p = selfDeclarationProblems(
      [again({ parts: [...stored.parts, { name: "miner", node: "n1", installed: true }], allowKinds: ["secret", "nats.user"] })],
      api,
      stored,
    );
    expect(p.map((x) => x.path)).toEqual(["parts", "allowKinds"]);
    // Without allowKinds, a part may declare no new requirement at all.
    const none = ModuleDoc.parse({ ...stored, allowKinds: undefined });
    expect(selfDeclarationProblems([ModuleDoc.parse({ ...none, requires: [...none.requires, { name: "t", kind: "secret" }] })], api, none)[0]?.message).toMatch(
      /to declare no kind/,
    );
  });

  it("reads the part from the subject alone", () => {
    expect(partOfApplySubject("mesh.api.apply.shop.n1.api")).toEqual(api);
    for (const s of [
      "mesh.api.apply",
      "mesh.api.apply.shop",
      "mesh.api.apply.shop.n1",
      "mesh.api.apply.shop.n1.api.x",
      "mesh.api.apply.Shop.n1.api",
      "other.api.apply.shop.n1.api",
    ]) {
      expect(partOfApplySubject(s), s).toBeUndefined();
    }
  });
});
