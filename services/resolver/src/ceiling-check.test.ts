import { describe, expect, it } from "vitest";
import { Kinds, bootstrapProvider, controlPlaneManifest, type ModuleDoc, type ProviderDoc, type RequirementOptions } from "@mesh/shared";
import { ceilingProblems } from "./ceiling-check.js";

const provider = (
  name: string,
  options: ProviderDoc["options"] = { signingKeysFile: "/k" },
  serves: ProviderDoc["serves"] = [Kinds.NatsUser],
): ProviderDoc => ({
  kind: "Provider",
  name,
  serves,
  node: "node-a",
  endpoint: "nats://127.0.0.1:4222",
  options,
  installed: true,
});
const shop = (options?: RequirementOptions, kind: ModuleDoc["requires"][number]["kind"] = Kinds.NatsUser): ModuleDoc => ({
  kind: "Module",
  name: "shop",
  parts: [{ name: "api", node: "node-a", installed: true }],
  requires: [
    { name: "db", kind: Kinds.PostgresDatabase },
    { name: "events", kind, ...(options ? { options } : {}) },
  ],
});

describe("ceilingProblems", () => {
  it("refuses a nats.user requirement past the only provider's ceiling, naming the subject, the ceiling and what to do", () => {
    const problems = ceilingProblems([shop({ publish: ">" })], [provider("nats-main")]);
    expect(problems).toEqual([
      {
        document: 0,
        path: "requires[1].options",
        message: expect.stringMatching(/^nats\.user shop\/events asks to publish ">" \(it reaches "x"\), past the ceiling of provider nats-main/),
      },
    ]);
    expect(problems[0]!.message).toContain("Ask the operator to widen the provider's options.allowPublish");
  });

  it("says nothing of what is within, of other kinds, or when no provider serves nats.user yet", () => {
    expect(ceilingProblems([shop()], [provider("nats-main")])).toEqual([]);
    expect(ceilingProblems([shop({ publish: "app.shop.orders" })], [provider("nats-main")])).toEqual([]);
    expect(ceilingProblems([shop({ publish: ">" }, Kinds.Secret)], [provider("nats-main")])).toEqual([]);
    expect(ceilingProblems([shop({ publish: ">" })], [provider("pg", {}, [Kinds.PostgresDatabase])])).toEqual([]);
  });

  it("takes a provider of the same apply over the stored one, both ways", () => {
    const wide = provider("nats-main", { signingKeysFile: "/k", allowPublish: ["shop:>"] });
    expect(ceilingProblems([wide, shop({ publish: ">" })], [provider("nats-main")])).toEqual([]);
    expect(ceilingProblems([shop({ publish: ">" }), provider("nats-main")], [wide])).toHaveLength(1);
  });

  it("refuses only when no provider of nats.user would issue it", () => {
    const wide = provider("nats-wide", { signingKeysFile: "/k", allowPublish: ">" });
    expect(ceilingProblems([shop({ publish: ">" })], [provider("nats-main"), wide])).toEqual([]);
    const [p] = ceilingProblems([shop({ publish: ">" })], [provider("nats-a"), provider("nats-b")]);
    expect(p!.message).toMatch(/^no provider of nats\.user would issue it: .*provider nats-a.*; and .*provider nats-b/);
  });

  it("leaves to provisioning a ceiling that is misconfigured and options that are invalid", () => {
    expect(ceilingProblems([shop({ publish: ">" })], [provider("nats-main", { allowPublish: ["a..b"] })])).toEqual([]);
    expect(ceilingProblems([shop({ publsh: ">" })], [provider("nats-main")])).toEqual([]);
  });

  it("accepts the control plane as meshctl bootstrap applies it", () => {
    const docs = [
      bootstrapProvider({
        url: "nats://127.0.0.1:4222",
        node: "node-a",
        auth: { signingKeysFile: "/k", admin: { username: "mesh-admin", passwordFile: "/a" } },
      }),
      controlPlaneManifest({ servicesNode: "node-a", nodes: ["node-a"] }),
    ];
    expect(ceilingProblems(docs, [provider("mesh-nats")])).toEqual([]);
    // Without its ceiling, the stored one refuses the control plane's identities.
    expect(ceilingProblems([docs[1]!], [provider("mesh-nats")]).length).toBeGreaterThan(0);
  });
});
