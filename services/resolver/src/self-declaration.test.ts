import { describe, expect, it } from "vitest";
import { ModuleDoc, ProviderDoc } from "@mesh/shared";
import { selfDeclarationProblems } from "./apply.js";

const stored = ModuleDoc.parse({
  kind: "Module",
  name: "shop",
  parts: [{ name: "api", node: "n1" }],
  requires: [{ name: "db", kind: "postgres.database" }],
  allowKinds: ["secret"],
});
const provider = ProviderDoc.parse({ kind: "Provider", name: "evil", serves: ["secret"], node: "n1", endpoint: "builtin://x" });
const again = (over: Partial<ModuleDoc>) => ModuleDoc.parse({ ...stored, ...over });

describe("what a part may declare on its module's own subject", () => {
  it("accepts its module with the operator's parts and allowKinds, an allowed kind added, an operator's requirement kept as it was", () => {
    expect(selfDeclarationProblems([again({ requires: [...stored.requires, { name: "token", kind: "secret" }] })], "shop", stored)).toEqual([]);
    expect(selfDeclarationProblems([again({ requires: [] })], "shop", stored)).toEqual([]);
  });

  it("refuses a module the operator has not declared, another module and a Provider, naming each document", () => {
    expect(selfDeclarationProblems([stored], "shop", undefined)[0]?.message).toMatch(/has not been declared by the operator yet/);
    const p = selfDeclarationProblems([stored, provider, again({ name: "other" })], "shop", stored);
    expect(p.map((x) => [x.document, x.path])).toEqual([
      [1, "kind"],
      [2, "name"],
    ]);
  });

  it("refuses other parts, other allowKinds, and a kind outside allowKinds, new or changed (an operator's requirement changed is new)", () => {
    const p = selfDeclarationProblems(
      [again({ parts: [{ name: "api", node: "n2", installed: true }], allowKinds: ["secret", "nats.user"], requires: [{ name: "db", kind: "postgres.database", options: { extensions: "x" } }, { name: "bus", kind: "nats.user" }] })],
      "shop",
      stored,
    );
    expect(p.map((x) => x.path)).toEqual(["parts", "allowKinds", "requires[0].kind", "requires[1].kind"]);
    // Without allowKinds, a part may declare no new requirement at all.
    const none = ModuleDoc.parse({ ...stored, allowKinds: undefined });
    expect(selfDeclarationProblems([ModuleDoc.parse({ ...none, requires: [...none.requires, { name: "t", kind: "secret" }] })], "shop", none)[0]?.message).toMatch(/the operator allows them no kind/);
  });
});
