import { describe, expect, it } from "vitest";
import { DeleteRequest } from "@mesh/shared";
import { grantFixture } from "../../../test/fixtures.js";
import { deleteProblems, servedBy } from "./delete.js";

const exists = { module: (n: string) => ["shop", "mesh"].includes(n), provider: (n: string) => n === "pg-main" };
const grants = [grantFixture(), grantFixture({ id: "mesh/db", module: "mesh", requirement: "db" })];
const req = (r: Partial<DeleteRequest>) => DeleteRequest.parse(r);

describe("deleteProblems", () => {
  it("refuses module mesh, and a provider that still serves grants, without force, naming why", () => {
    expect(deleteProblems(req({ documents: [{ kind: "Module", name: "mesh" }] }), grants, exists)[0]!.message).toMatch(
      /control plane.*refused without --force/,
    );
    const p = deleteProblems(req({ documents: [{ kind: "Provider", name: "pg-main" }] }), grants, exists)[0]!.message;
    expect(p).toMatch(/still serves 2 grants \(shop\/db, mesh\/db\), the control plane's own among them \(mesh\/db\)/);
    expect(
      deleteProblems(
        req({
          documents: [
            { kind: "Module", name: "mesh" },
            { kind: "Provider", name: "pg-main" },
          ],
          force: true,
        }),
        grants,
        exists,
      ),
    ).toEqual([]);
  });

  it("a provider deleted with the modules it serves must outlive them: their grants are revoked through it", () => {
    const p = deleteProblems(
      req({
        documents: [
          { kind: "Module", name: "shop" },
          { kind: "Provider", name: "pg-main" },
        ],
      }),
      [grantFixture()],
      exists,
    );
    expect(p).toHaveLength(1);
    expect(p[0]!.message).toMatch(/delete the modules first, then the provider/);
  });

  it("names what does not exist, and what retains nothing", () => {
    const p = deleteProblems(req({ documents: [{ kind: "Module", name: "nosuch" }], retained: ["shop/db", "not-a-grant"] }), grants, exists);
    expect(p.map((x) => x.message)).toEqual([
      "there is no module nosuch (meshctl get modules lists them)",
      "shop/db retains nothing (meshctl status lists what is retained)",
      '"not-a-grant" is not a grant (MODULE/REQUIREMENT)',
    ]);
  });

  it("a grant taken back or retained is not served any more", () => {
    expect(servedBy("pg-main", [grantFixture({ revoked: { at: "t", generation: 2, dropped: false } }), grantFixture({ retained: { since: "t" } })])).toEqual(
      [],
    );
  });
});
