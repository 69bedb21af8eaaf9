import { describe, expect, it } from "vitest";
import { BUILTIN_SECRET_PROVIDER, Kinds } from "@mesh/shared";
import { createAdapter } from "@mesh/providers";
import { describeProviderConformance, freshGrant } from "./provider-conformance.js";

const provider = { name: BUILTIN_SECRET_PROVIDER, node: "node-a", endpoint: "builtin:secret" };

describeProviderConformance("secret", () => createAdapter(Kinds.Secret, provider), {
  stateful: false,
  wrongCredential: (b) => ({ ...b, value: "" }),
});

describe("secret adapter", () => {
  it("binds type, provider and value, and nothing else", async () => {
    const adapter = createAdapter(Kinds.Secret, provider);
    const secret = adapter.generate();
    expect(secret.value).toMatch(/^[A-Za-z0-9_-]{43}$/);
    const { bindings } = await adapter.create({ grant: freshGrant(), secret });
    expect(bindings).toEqual({ type: "secret", provider: BUILTIN_SECRET_PROVIDER, value: secret.value });
    expect(await adapter.login({ bindings: { type: "secret", provider: BUILTIN_SECRET_PROVIDER } })).toMatchObject({
      ok: false,
      reason: "rejected",
    });
  });
});
